/* shardguard.h: the C ABI of libshardguard, for trainers in any language (the Python
 * package uses it through ctypes). It wraps the C++ job client (hooks/client.h): read the
 * SHARDGUARD_* environment, resume from a checkpoint, heartbeat, learn when to checkpoint
 * (schedule, agent request, checkpoint signal), write this rank's shard, commit.
 *
 *   sg_client* c; sg_client_from_env("ckpt", 100, 0, &c);
 *   sg_reader* r; if (sg_client_open_resume(c, &r) == SG_OK) { ...sg_reader_read...; }
 *   for (step...) { sg_client_heartbeat(c, step);
 *     if (sg_client_should_checkpoint(c, step)) { sg_writer* w; sg_client_begin_save(c, step,
 *       &w); sg_writer_add_tensor(w, ...); ...; sg_client_save(c, w, NULL); }
 *     if (sg_client_should_exit(c)) break; }
 *   sg_client_wait(c); sg_client_free(c);
 *
 * Errors: every fallible call returns an sg_status; on failure sg_last_error() gives a
 * message naming what failed (thread-local, valid until the next failing call on the same
 * thread). No C++ exception crosses this boundary.
 * Thread-safety: a client and its writers are used from one thread at a time (the training
 * thread); a reader may be used from many threads at once. Handles are freed exactly once.
 * Plain C89 plus <stdint.h>; only sg_* symbols are exported.
 */
#ifndef SHARDGUARD_H_
#define SHARDGUARD_H_

#include <stddef.h>
#include <stdint.h>

/* Bumped on incompatible changes; sg_api_version() returns the library's value, which a
 * caller compares with the one it was built against. */
#define SHARDGUARD_API_VERSION 1

/* Exit codes of a job (shardguard's own table): after an emergency checkpoint (EX_TEMPFAIL,
 * "requeue me"), and after reporting that the resume checkpoint failed verification
 * (EX_IOERR; the supervisor sets that checkpoint aside and resumes from the one before). */
#define SG_EXIT_AFTER_EMERGENCY 75
#define SG_EXIT_RESUME_FAILED 74

#if defined(SG_BUILDING_LIBRARY)
#define SG_API __attribute__((visibility("default")))
#else
#define SG_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes: the same classes as the C++ ErrorCode, plus SG_OK. */
typedef enum sg_status {
  SG_OK = 0,
  SG_ERR_IO = 1,        /* an OS call failed */
  SG_ERR_NO_SPACE = 2,  /* the disk is full */
  SG_ERR_NOT_FOUND = 3, /* no such file, tensor, or checkpoint (fresh start) */
  SG_ERR_INVALID = 4,   /* a bad argument */
  SG_ERR_CORRUPT = 5,   /* bad bytes on storage */
  SG_ERR_TIMEOUT = 6,   /* a deadline passed */
  SG_ERR_CANCELLED = 7,
  SG_ERR_FENCED = 8, /* a newer attempt owns the step, or it is already committed */
  SG_ERR_UNSUPPORTED = 9,
  SG_ERR_INTERNAL = 10 /* a bug (an unexpected exception is reported as this) */
} sg_status;

typedef struct sg_client sg_client; /* one rank's connection to shardguard */
typedef struct sg_reader sg_reader; /* a committed checkpoint, open for reading */
typedef struct sg_writer sg_writer; /* this rank's part of a checkpoint being saved */

/* SHARDGUARD_API_VERSION of the loaded library. */
SG_API int sg_api_version(void);
/* The message of the last failed call on this thread ("" if none). */
SG_API const char* sg_last_error(void);
/* "SG_ERR_NOT_FOUND", ... for a status code. */
SG_API const char* sg_status_name(sg_status status);

/* ---- client ---- */

/* Creates a client from the SHARDGUARD_* environment over these defaults: checkpoint_dir
 * (NULL: only from SHARDGUARD_CHECKPOINT_DIR), every_steps (periodic checkpoints without an
 * agent, 0: off), async_save (non-zero: save() returns after a snapshot). Connects to the
 * agent's socket when one is given and installs the checkpoint signal's handler. */
SG_API sg_status sg_client_from_env(const char* checkpoint_dir, uint64_t every_steps,
                                    int async_save, sg_client** out);
/* Waits for a background save, disconnects and frees. NULL is ignored. */
SG_API void sg_client_free(sg_client* client);

SG_API uint32_t sg_client_rank(const sg_client* client);
SG_API uint32_t sg_client_world_size(const sg_client* client);
SG_API uint32_t sg_client_local_rank(const sg_client* client);
SG_API uint64_t sg_client_attempt(const sg_client* client);
/* Valid while the client lives. */
SG_API const char* sg_client_job_id(const sg_client* client);
SG_API const char* sg_client_checkpoint_dir(const sg_client* client);
/* Non-zero when run by shardguard (SHARDGUARD_JOB_ID set). */
SG_API int sg_client_under_shardguard(const sg_client* client);

/* Tells the agent this rank reached `step` (rate-limited inside). */
SG_API void sg_client_heartbeat(sg_client* client, uint64_t step);
/* The value of a training scalar at `step`, for the supervisor's divergence guard: `name` is
 * "loss" or "grad_norm" (else SG_ERR_INVALID). Call it before sg_client_heartbeat(step); values
 * are aggregated until the next heartbeat goes out (a NaN or Inf makes it go out at once). */
SG_API sg_status sg_client_report_scalar(sg_client* client, const char* name, uint64_t step,
                                         double value);
/* 1 when `step` must be saved (schedule, agent request or checkpoint signal), else 0. */
SG_API int sg_client_should_checkpoint(sg_client* client, uint64_t step);
/* 1 once an emergency checkpoint is committed or the agent said stop: exit cleanly. */
SG_API int sg_client_should_exit(const sg_client* client);
/* 1 and fills the out-parameters (any may be NULL) when an emergency is pending, else 0.
 * `reason` gets at most reason_size-1 bytes plus a NUL. */
SG_API int sg_client_emergency(const sg_client* client, int64_t* deadline_unix_ms,
                               uint64_t* at_step, char* reason, size_t reason_size);
/* Step of the last checkpoint this process saw committed (0 if none). */
SG_API uint64_t sg_client_last_committed_step(const sg_client* client);
/* For hosts that catch the checkpoint signal themselves (a Python handler): acts as if the
 * client's own handler had seen it. Async-signal-safe. */
SG_API sg_status sg_client_notify_signal(sg_client* client);
/* Re-installs the client's handlers for its checkpoint signal and, when it catches it,
 * SIGTERM (after a host replaced them). */
SG_API sg_status sg_client_restore_signal(sg_client* client);
/* How long rank 0 waits for every rank's part of a checkpoint (SHARDGUARD_COMMIT_TIMEOUT_MS),
 * in milliseconds. */
SG_API uint64_t sg_client_commit_timeout_ms(const sg_client* client);
/* For hosts that catch SIGTERM themselves: acts as if the client's own SIGTERM handler had
 * seen it (under shardguard the client tells the supervisor, which picks the step to save).
 * SG_ERR_UNSUPPORTED when the client does not catch SIGTERM (outside shardguard by default,
 * or SHARDGUARD_HANDLE_SIGTERM=0). Async-signal-safe. */
SG_API sg_status sg_client_notify_sigterm(sg_client* client);

/* ---- resume ---- */

/* Opens the checkpoint to resume from (SHARDGUARD_RESUME_MANIFEST, or outside shardguard
 * the newest complete one). SG_ERR_NOT_FOUND on a fresh start. */
SG_API sg_status sg_client_open_resume(const sg_client* client, sg_reader** out);
/* The manifest sg_client_open_resume() opens ("" on a fresh start). Valid while the client
 * lives. */
SG_API const char* sg_client_resume_manifest(const sg_client* client);
/* Tells the supervisor that the resume checkpoint failed verification, with `reader`'s first
 * checksum failure (file and offset) when it met one (reader may be NULL) and `message` (NULL:
 * the failure's own description). Then exit with SG_EXIT_RESUME_FAILED: the supervisor sets
 * that checkpoint aside and relaunches from the one before. */
SG_API sg_status sg_client_report_resume_failure(sg_client* client, const sg_reader* reader,
                                                 const char* message);
/* Opens any committed checkpoint: a step directory or its manifest.json. */
SG_API sg_status sg_reader_open(const char* path, sg_reader** out);
SG_API void sg_reader_free(sg_reader* reader);

/* The checkpoint's step (the step to resume after), world size and job id. */
SG_API uint64_t sg_reader_step(const sg_reader* reader);
SG_API uint32_t sg_reader_world_size(const sg_reader* reader);
SG_API const char* sg_reader_job_id(const sg_reader* reader);
/* Tensors in sorted name order; NULL for an index out of range. */
SG_API size_t sg_reader_tensor_count(const sg_reader* reader);
SG_API const char* sg_reader_tensor_name(const sg_reader* reader, size_t index);
/* dtype (safetensors name, "F32", "BF16", ...), rank and global shape of a tensor. The
 * pointers stay valid while the reader lives. SG_ERR_NOT_FOUND for an unknown name. */
SG_API sg_status sg_reader_tensor_info(const sg_reader* reader, const char* name,
                                       const char** dtype, size_t* ndim, const uint64_t** shape);
/* Reads the box (offsets, sizes; ndim entries each) of tensor `name` into `out`, which
 * holds exactly the box's bytes packed row-major. offsets == sizes == NULL: the whole
 * tensor. Assembles the box from every chunk that overlaps it (resharding). */
SG_API sg_status sg_reader_read(const sg_reader* reader, const char* name, size_t ndim,
                                const uint64_t* offsets, const uint64_t* sizes, void* out,
                                size_t out_size);
/* One box of one tensor, as sg_reader_read takes it. */
typedef struct sg_read_spec {
  const char* name;
  size_t ndim;
  const uint64_t* offsets; /* offsets == sizes == NULL: the whole tensor */
  const uint64_t* sizes;
  void* out;
  size_t out_size;
} sg_read_spec;
/* sg_reader_read of each of the `count` specs, their bytes read together: from a bucket,
 * the reader's ranged GETs stay in flight across tensors instead of finishing each tensor
 * before the next starts. Stops at the first failure, naming the tensor; outs of the other
 * specs may then be filled or not. */
SG_API sg_status sg_reader_read_many(const sg_reader* reader, const sg_read_spec* reads,
                                     size_t count);
/* Rank `rank`'s saved state: opaque RNG bytes, and JSON text of the data loader position
 * and the user state ("null" when unset; empty state for a rank beyond the world size).
 * Valid while the reader lives. */
SG_API sg_status sg_reader_rank_rng(const sg_reader* reader, uint32_t rank, const void** data,
                                    size_t* size);
SG_API const char* sg_reader_rank_data_position(const sg_reader* reader, uint32_t rank);
SG_API const char* sg_reader_rank_user(const sg_reader* reader, uint32_t rank);
/* The job's state set by rank 0: step, LR schedule JSON, user JSON. */
SG_API uint64_t sg_reader_global_step(const sg_reader* reader);
SG_API const char* sg_reader_global_lr_schedule(const sg_reader* reader);
SG_API const char* sg_reader_global_user(const sg_reader* reader);
/* Format 2's state trees (the structure of a saved state, tensors as references; see the
 * Python package's _tree.py): rank 0's global tree and rank `rank`'s own, as JSON text, "null"
 * when none was saved. Valid while the reader lives. */
SG_API const char* sg_reader_global_tree(const sg_reader* reader);
SG_API const char* sg_reader_rank_tree(const sg_reader* reader, uint32_t rank);
/* 1 when a read of this reader found a block that fails its checksum, else 0. Fills `file`
 * (relative to the step directory; valid while the reader lives), `offset` of the bad block,
 * and `has_offset` (0 when the file was checked whole, as format 1 files are); any may be
 * NULL. The first failure is kept. */
SG_API int sg_reader_checksum_failure(const sg_reader* reader, const char** file,
                                      uint64_t* offset, int* has_offset);

/* ---- save ---- */

/* A writer for this rank's part of `step`. */
SG_API sg_status sg_client_begin_save(sg_client* client, uint64_t step, sg_writer** out);
/* A tensor this rank holds whole. `data` (size bytes, packed row-major, little-endian) is
 * read during sg_client_save(), so it must stay valid and unchanged until that returns. */
SG_API sg_status sg_writer_add_tensor(sg_writer* writer, const char* name, const char* dtype,
                                      size_t ndim, const uint64_t* shape, const void* data,
                                      size_t size);
/* The box (offsets, sizes) of a tensor of `global_shape` split across ranks; `data` holds
 * exactly that box. Same lifetime rule as sg_writer_add_tensor. */
SG_API sg_status sg_writer_add_chunk(sg_writer* writer, const char* name, const char* dtype,
                                     size_t ndim, const uint64_t* global_shape,
                                     const uint64_t* offsets, const uint64_t* sizes,
                                     const void* data, size_t size);
/* This rank's state: RNG bytes (copied), data loader position and user state as JSON text
 * (NULL: "null"). Invalid JSON fails the save. */
SG_API sg_status sg_writer_set_rank_state(sg_writer* writer, const void* rng, size_t rng_size,
                                          const char* data_position_json, const char* user_json);
/* The job's state; required on rank 0, refused on other ranks. */
SG_API sg_status sg_writer_set_global_state(sg_writer* writer, uint64_t step,
                                            const char* lr_schedule_json, const char* user_json);
/* Format 2's state trees: this rank's own, and (rank 0 only) the global one. A JSON object;
 * NULL removes it. Independent of the calls above: each sets only its own part. */
SG_API sg_status sg_writer_set_rank_tree(sg_writer* writer, const char* tree_json);
SG_API sg_status sg_writer_set_global_tree(sg_writer* writer, const char* tree_json);
/* Abandons a writer that will not be saved. NULL is ignored. */
SG_API void sg_writer_free(sg_writer* writer);

/* Saves and frees `writer` (it is consumed even on failure): writes the shard (in async mode
 * after a snapshot, in the background), then rank 0 commits. `reason`: NULL (periodic, or
 * emergency when one is pending), "periodic", "emergency", "final" or "manual". */
SG_API sg_status sg_client_save(sg_client* client, sg_writer* writer, const char* reason);
/* Waits for a background save and returns its result (SG_OK when none ran). */
SG_API sg_status sg_client_wait(sg_client* client);
/* Sizes the staging memory of async saves for `bytes` of this rank's tensors (plus room for
 * the file header) and populates it in the background (huge pages), so that the first save
 * stalls no longer than later ones; returns at once (after waiting for a save in flight).
 * An async client does this itself from the resume manifest, or from
 * SHARDGUARD_STAGING_BYTES (tensor bytes). */
SG_API sg_status sg_client_reserve(sg_client* client, uint64_t bytes);

/* ---- GPU snapshots ----
 * Device memory is copied into the client's staging (page-locked) by cudaMemcpyAsync on a
 * dedicated copy stream while training goes on; the write starts once the copy is done.
 * libcudart is loaded at run time (SHARDGUARD_CUDART, else libcudart.so.13/.12/.11.0):
 * without it these calls fail with SG_ERR_UNSUPPORTED and everything else works.
 *
 *   sg_client_begin_save(c, step, &w); sg_writer_add_device_chunk(w, ..., d_ptr, n); ...
 *   sg_client_snapshot_device(c, w, NULL, stream);     returns at once
 *   each step: sg_client_device_fence(c, stream);      before kernels that write that memory
 *              sg_client_device_poll(c, &started);     starts the write once copied
 *   emergency / last step: sg_client_device_finish(c); */

/* Sizes the staging for `bytes` of tensors (as sg_client_reserve) and page-locks it in the
 * background, so that the first snapshot finds it ready. */
SG_API sg_status sg_client_device_prepare(sg_client* client, uint64_t bytes);
/* A tensor / the box of a tensor whose `size` bytes are device memory at `device_ptr`
 * (CUDA): copied by sg_client_snapshot_device, so it must stay valid until then. */
SG_API sg_status sg_writer_add_device_tensor(sg_writer* writer, const char* name, const char* dtype,
                                             size_t ndim, const uint64_t* shape,
                                             const void* device_ptr, size_t size);
SG_API sg_status sg_writer_add_device_chunk(sg_writer* writer, const char* name, const char* dtype,
                                            size_t ndim, const uint64_t* global_shape,
                                            const uint64_t* offsets, const uint64_t* sizes,
                                            const void* device_ptr, size_t size);
/* Consumes `writer`: waits for the previous save, lays its file out in staging, and queues
 * the device-to-host copies after the work queued on `cuda_stream` (a cudaStream_t; NULL:
 * the legacy default stream). Returns at once. `reason` as in sg_client_save. */
SG_API sg_status sg_client_snapshot_device(sg_client* client, sg_writer* writer, const char* reason,
                                           void* cuda_stream);
/* Makes `cuda_stream` wait for the pending snapshot's copies (SG_OK when none). */
SG_API sg_status sg_client_device_fence(sg_client* client, void* cuda_stream);
/* Starts the save of a snapshot whose copies are done; *started (may be NULL) = 1 if it did.
 * An async client writes in the background; a sync one writes (and commits) here. */
SG_API sg_status sg_client_device_poll(sg_client* client, int* started);
/* Waits for the pending snapshot's copies and saves it (SG_OK when none). */
SG_API sg_status sg_client_device_finish(sg_client* client);

#ifdef __cplusplus
}
#endif

#endif /* SHARDGUARD_H_ */
