/* The C ABI from C99: save a checkpoint (whole tensors, chunks, state), read it back through
 * a reader and through resume, and check errors, messages and NULL handling. Exit 0 on
 * success; every failure prints the line and the library's message. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardguard.h"

extern int c89_header_api_version(void);

static int failures = 0;

#define CHECK(cond)                                                                           \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__, __LINE__, #cond, \
              sg_last_error());                                                               \
      ++failures;                                                                             \
    }                                                                                         \
  } while (0)

int main(void) {
  char dir[] = "/tmp/sg-c-abi-XXXXXX";
  char path[256], cmd[300];
  const char* env_vars[] = {"SHARDGUARD_JOB_ID",
                            "SHARDGUARD_CHECKPOINT_DIR",
                            "SHARDGUARD_RESUME_MANIFEST",
                            "SHARDGUARD_CONTROL_SOCKET",
                            "SHARDGUARD_RANK",
                            "SHARDGUARD_WORLD_SIZE",
                            "RANK",
                            "WORLD_SIZE"};
  size_t i;
  sg_client* client = NULL;
  sg_writer* writer = NULL;
  sg_reader* reader = NULL;
  const float w[6] = {1.0f, -2.5f, 3.0f, 0.0f, -0.0f, 1e-30f};
  const int64_t ids_lo[2] = {INT64_MIN, -1}, ids_hi[2] = {0, INT64_MAX};
  const uint16_t bf16[3] = {0x3f80, 0xc000, 0x7fc1};
  const uint64_t shape_w[2] = {2, 3}, shape_ids[1] = {4}, shape_bf[1] = {3};
  const uint64_t off0[1] = {0}, off2[1] = {2}, two[1] = {2};
  const char rng[5] = {'r', '\0', 'n', '\xff', 'g'};

  for (i = 0; i < sizeof env_vars / sizeof env_vars[0]; ++i) unsetenv(env_vars[i]);
  if (mkdtemp(dir) == NULL) return 2;
  CHECK(sg_api_version() == SHARDGUARD_API_VERSION);
  CHECK(c89_header_api_version() == SHARDGUARD_API_VERSION);
  CHECK(strcmp(sg_status_name(SG_ERR_NOT_FOUND), "SG_ERR_NOT_FOUND") == 0);

  CHECK(sg_client_from_env(NULL, 0, 0, &client) == SG_ERR_INVALID); /* no directory */
  CHECK(strstr(sg_last_error(), "SHARDGUARD_CHECKPOINT_DIR") != NULL);
  CHECK(client == NULL);
  CHECK(sg_client_from_env(dir, 0, 0, &client) == SG_OK);
  CHECK(sg_client_rank(client) == 0 && sg_client_world_size(client) == 1);
  CHECK(strcmp(sg_client_checkpoint_dir(client), dir) == 0);
  CHECK(sg_client_under_shardguard(client) == 0);
  /* The divergence guard's scalars: known names only (outside shardguard nothing is sent). */
  CHECK(sg_client_report_scalar(client, "loss", 1, 2.5) == SG_OK);
  CHECK(sg_client_report_scalar(client, "grad_norm", 1, 0.5) == SG_OK);
  CHECK(sg_client_report_scalar(client, "accuracy", 1, 0.5) == SG_ERR_INVALID);
  CHECK(sg_client_report_scalar(client, NULL, 1, 0.5) == SG_ERR_INVALID);
  CHECK(sg_client_report_scalar(NULL, "loss", 1, 0.5) == SG_ERR_INVALID);
  sg_client_heartbeat(client, 1);
  CHECK(sg_client_open_resume(client, &reader) == SG_ERR_NOT_FOUND); /* fresh start */
  CHECK(reader == NULL && sg_last_error()[0] != '\0');

  CHECK(sg_client_begin_save(client, 5, &writer) == SG_OK);
  CHECK(sg_writer_add_tensor(writer, "w", "F32", 2, shape_w, w, sizeof w) == SG_OK);
  CHECK(sg_writer_add_tensor(writer, "bad", "F33", 2, shape_w, w, sizeof w) == SG_ERR_INVALID);
  CHECK(strstr(sg_last_error(), "F33") != NULL);
  CHECK(sg_writer_add_tensor(writer, "short", "F32", 2, shape_w, w, 8) == SG_ERR_INVALID);
  CHECK(sg_writer_add_chunk(writer, "ids", "I64", 1, shape_ids, off0, two, ids_lo, sizeof ids_lo) ==
        SG_OK);
  CHECK(sg_writer_add_chunk(writer, "ids", "I64", 1, shape_ids, off2, two, ids_hi, sizeof ids_hi) ==
        SG_OK);
  CHECK(sg_writer_add_tensor(writer, "bf", "BF16", 1, shape_bf, bf16, sizeof bf16) == SG_OK);
  CHECK(sg_writer_set_rank_state(writer, rng, sizeof rng, "{\"epoch\":1}", NULL) == SG_OK);
  CHECK(sg_writer_set_global_state(writer, 5, "{\"lr\":5}", "{\"who\":\"c\"}") == SG_OK);
  CHECK(sg_client_save(client, writer, NULL) == SG_OK);
  CHECK(sg_client_last_committed_step(client) == 5);
  CHECK(sg_client_should_exit(client) == 0);

  /* A save that fails is reported, and the writer is consumed all the same. */
  CHECK(sg_client_begin_save(client, 6, &writer) == SG_OK);
  CHECK(sg_writer_set_rank_state(writer, NULL, 0, "{not json", NULL) == SG_OK);
  CHECK(sg_writer_set_global_state(writer, 6, NULL, NULL) == SG_OK);
  CHECK(sg_client_save(client, writer, "manual") == SG_ERR_INVALID);
  CHECK(strstr(sg_last_error(), "JSON") != NULL);
  CHECK(sg_client_begin_save(client, 6, &writer) == SG_OK);
  sg_writer_free(writer); /* abandoned */

  snprintf(path, sizeof path, "%s/step-000000005", dir);
  CHECK(sg_reader_open(path, &reader) == SG_OK);
  if (reader != NULL) {
    const char* dtype = NULL;
    size_t ndim = 0, size = 0;
    const uint64_t* shape = NULL;
    const void* data = NULL;
    float wb[6];
    int64_t mid[2];
    uint16_t bfb[3];
    const uint64_t off1[1] = {1};
    CHECK(sg_reader_step(reader) == 5 && sg_reader_world_size(reader) == 1);
    CHECK(sg_reader_tensor_count(reader) == 3);
    CHECK(strcmp(sg_reader_tensor_name(reader, 0), "bf") == 0);
    CHECK(strcmp(sg_reader_tensor_name(reader, 1), "ids") == 0);
    CHECK(sg_reader_tensor_name(reader, 3) == NULL);
    CHECK(sg_reader_tensor_info(reader, "w", &dtype, &ndim, &shape) == SG_OK);
    CHECK(strcmp(dtype, "F32") == 0 && ndim == 2 && shape[0] == 2 && shape[1] == 3);
    CHECK(sg_reader_tensor_info(reader, "nope", &dtype, &ndim, &shape) == SG_ERR_NOT_FOUND);
    CHECK(sg_reader_read(reader, "w", 0, NULL, NULL, wb, sizeof wb) == SG_OK);
    CHECK(memcmp(wb, w, sizeof w) == 0);
    CHECK(sg_reader_read(reader, "w", 0, NULL, NULL, wb, 4) == SG_ERR_INVALID);
    /* A box across both chunks. */
    CHECK(sg_reader_read(reader, "ids", 1, off1, two, mid, sizeof mid) == SG_OK);
    CHECK(mid[0] == -1 && mid[1] == 0);
    CHECK(sg_reader_read(reader, "bf", 0, NULL, NULL, bfb, sizeof bfb) == SG_OK);
    CHECK(memcmp(bfb, bf16, sizeof bf16) == 0);
    /* Several tensors at once: the same bytes; a bad spec fails naming its tensor. */
    {
      float wm[6];
      int64_t midm[2];
      uint16_t bfm[3];
      sg_read_spec many[3] = {{"w", 0, NULL, NULL, NULL, sizeof wm},
                              {"ids", 1, NULL, NULL, NULL, sizeof midm},
                              {"bf", 0, NULL, NULL, NULL, sizeof bfm}};
      many[0].out = wm;
      many[1].offsets = off1;
      many[1].sizes = two;
      many[1].out = midm;
      many[2].out = bfm;
      CHECK(sg_reader_read_many(reader, many, 3) == SG_OK);
      CHECK(memcmp(wm, w, sizeof w) == 0 && midm[0] == -1 && midm[1] == 0 &&
            memcmp(bfm, bf16, sizeof bf16) == 0);
      CHECK(sg_reader_read_many(reader, many, 0) == SG_OK);
      many[1].out_size = 4;
      CHECK(sg_reader_read_many(reader, many, 3) == SG_ERR_INVALID);
      CHECK(strstr(sg_last_error(), "'ids'") != NULL);
      many[1].out_size = sizeof midm;
      many[2].name = "nope";
      CHECK(sg_reader_read_many(reader, many, 3) == SG_ERR_NOT_FOUND);
      CHECK(strstr(sg_last_error(), "nope") != NULL);
    }
    CHECK(sg_reader_rank_rng(reader, 0, &data, &size) == SG_OK);
    CHECK(size == sizeof rng && memcmp(data, rng, size) == 0);
    CHECK(strcmp(sg_reader_rank_data_position(reader, 0), "{\"epoch\":1}") == 0);
    CHECK(strcmp(sg_reader_rank_user(reader, 0), "null") == 0);
    CHECK(sg_reader_global_step(reader) == 5);
    CHECK(strcmp(sg_reader_global_lr_schedule(reader), "{\"lr\":5}") == 0);
    CHECK(strcmp(sg_reader_global_user(reader), "{\"who\":\"c\"}") == 0);
    sg_reader_free(reader);
  }
  /* Outside shardguard, resume finds the newest complete checkpoint. */
  reader = NULL;
  CHECK(sg_client_open_resume(client, &reader) == SG_OK);
  CHECK(reader != NULL && sg_reader_step(reader) == 5);
  sg_reader_free(reader);

  /* A host that caught the signal itself forwards it: an emergency at the step at hand. */
  {
    int64_t deadline = 0;
    uint64_t at = 0;
    char reason[16];
    CHECK(sg_client_emergency(client, &deadline, &at, reason, sizeof reason) == 0);
    CHECK(sg_client_notify_signal(client) == SG_OK);
    CHECK(sg_client_should_checkpoint(client, 9) == 1);
    CHECK(sg_client_emergency(client, &deadline, &at, reason, sizeof reason) == 1);
    CHECK(at == 9 && strcmp(reason, "signal") == 0 && deadline > 0);
  }
  CHECK(sg_client_restore_signal(client) == SG_OK);
  CHECK(sg_client_wait(client) == SG_OK);

  CHECK(sg_reader_open(dir, &reader) == SG_ERR_NOT_FOUND); /* the parent is no checkpoint */
  CHECK(sg_client_save(NULL, NULL, NULL) == SG_ERR_INVALID);
  sg_client_free(NULL);
  sg_reader_free(NULL);
  sg_writer_free(NULL);
  sg_client_free(client);

  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  if (failures == 0) printf("c_abi_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
