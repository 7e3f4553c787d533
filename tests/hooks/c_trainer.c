/* sg_c_trainer DIR STEPS SLEEP_US EVERY: a toy trainer in C99 on the C ABI, for the kill -9
 * tests. Its state (weights, a moment, counters, flags, an xorshift RNG and a data position)
 * evolves deterministically, is checkpointed every EVERY steps and at the last step
 * ("final"), and is resumed from the newest complete checkpoint after any kill, so that an
 * interrupted run ends bit-identical to one that never stopped. Exit 0 when done. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shardguard.h"

#define ROWS 64
#define COLS 32
#define N (ROWS * COLS)

static float w[N], m[N];
static int64_t counts[4];
static uint8_t flags[16];
static uint64_t rng = 0x9e3779b97f4a7c15ULL, position = 0;

static uint64_t next_random(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 0x2545f4914f6cdd1dULL;
}

static float learning_rate(uint64_t step) { return 0.01f / (1.0f + (float)step / 100.0f); }

static void train_step(uint64_t step) {
  int i;
  const float lr = learning_rate(step);
  for (i = 0; i < N; ++i) {
    const uint64_t r = next_random();
    const float g = (float)((r >> 40) & 0xffff) / 65536.0f - 0.5f;
    m[i] = 0.9f * m[i] + 0.1f * g;
    w[i] -= lr * m[i];
    counts[i % 4] += (int64_t)(r & 7);
    if ((r & 0xff) == 0) flags[i % 16] ^= 1;
  }
  position += 3;
}

static int fail(const char* what) {
  fprintf(stderr, "c_trainer: %s: %s\n", what, sg_last_error());
  return 1;
}

static int save(sg_client* c, uint64_t step, int last) {
  sg_writer* wr = NULL;
  const uint64_t shape[2] = {ROWS, COLS}, four[1] = {4}, sixteen[1] = {16};
  char pos[64], lr[64];
  snprintf(pos, sizeof pos, "{\"index\":%llu}", (unsigned long long)position);
  snprintf(lr, sizeof lr, "{\"lr\":%.9g}", (double)learning_rate(step));
  if (sg_client_begin_save(c, step, &wr) != SG_OK) return fail("begin save");
  if (sg_writer_add_tensor(wr, "w", "F32", 2, shape, w, sizeof w) != SG_OK ||
      sg_writer_add_tensor(wr, "m", "F32", 2, shape, m, sizeof m) != SG_OK ||
      sg_writer_add_tensor(wr, "counts", "I64", 1, four, counts, sizeof counts) != SG_OK ||
      sg_writer_add_tensor(wr, "flags", "BOOL", 1, sixteen, flags, sizeof flags) != SG_OK ||
      sg_writer_set_rank_state(wr, &rng, sizeof rng, pos, NULL) != SG_OK ||
      sg_writer_set_global_state(wr, step, lr, "{\"trainer\":\"c\"}") != SG_OK) {
    sg_writer_free(wr);
    return fail("add");
  }
  if (sg_client_save(c, wr, last ? "final" : NULL) != SG_OK) return fail("save");
  return 0;
}

static int resume(sg_client* c, uint64_t* start) {
  sg_reader* r = NULL;
  const void* bytes = NULL;
  size_t size = 0;
  unsigned long long pos = 0;
  sg_read_spec state[4] = {{"w", 0, NULL, NULL, NULL, sizeof w},
                           {"m", 0, NULL, NULL, NULL, sizeof m},
                           {"counts", 0, NULL, NULL, NULL, sizeof counts},
                           {"flags", 0, NULL, NULL, NULL, sizeof flags}};
  sg_status st = sg_client_open_resume(c, &r);
  *start = 0;
  if (st == SG_ERR_NOT_FOUND) return 0;
  if (st != SG_OK) return fail("open resume");
  state[0].out = w;
  state[1].out = m;
  state[2].out = counts;
  state[3].out = flags;
  if (sg_reader_read_many(r, state, 4) != SG_OK ||
      sg_reader_rank_rng(r, 0, &bytes, &size) != SG_OK || size != sizeof rng ||
      sscanf(sg_reader_rank_data_position(r, 0), "{\"index\":%llu}", &pos) != 1) {
    sg_reader_free(r);
    return fail("read checkpoint");
  }
  memcpy(&rng, bytes, sizeof rng);
  position = pos;
  *start = sg_reader_step(r);
  sg_reader_free(r);
  return 0;
}

int main(int argc, char** argv) {
  sg_client* c = NULL;
  uint64_t steps, every, start = 0, step;
  long sleep_us;
  int i, rc = 0;
  if (argc != 5) {
    fprintf(stderr, "usage: sg_c_trainer DIR STEPS SLEEP_US EVERY\n");
    return 2;
  }
  steps = strtoull(argv[2], NULL, 10);
  sleep_us = strtol(argv[3], NULL, 10);
  every = strtoull(argv[4], NULL, 10);
  for (i = 0; i < N; ++i) w[i] = (float)(i % 17) / 17.0f - 0.5f;
  if (sg_client_from_env(argv[1], every, 0, &c) != SG_OK) return fail("client");
  if (resume(c, &start) != 0) return 1;
  for (step = start + 1; step <= steps && rc == 0; ++step) {
    struct timespec ts;
    train_step(step);
    sg_client_heartbeat(c, step);
    if (step == steps || sg_client_should_checkpoint(c, step)) rc = save(c, step, step == steps);
    if (sg_client_should_exit(c)) {
      sg_client_free(c);
      return 75;
    }
    ts.tv_sec = sleep_us / 1000000;
    ts.tv_nsec = (sleep_us % 1000000) * 1000;
    nanosleep(&ts, NULL);
  }
  if (rc == 0 && sg_client_wait(c) != SG_OK) rc = fail("wait");
  sg_client_free(c);
  if (rc == 0) printf("c_trainer: done at step %llu\n", (unsigned long long)steps);
  return rc;
}
