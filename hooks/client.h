// The job side of shardguard: what a training loop links to checkpoint and to hear about
// preemption. A trainer needs about five calls:
//
//   auto client = Client::from_env(defaults);           // reads SHARDGUARD_* variables
//   if (auto r = client->open_resume(); r.ok()) load(*r);  // resume when a manifest is given
//   for (step...) { client->heartbeat(step);
//     if (client->should_checkpoint(step)) { auto w = client->begin_save(step); add...;
//                                            client->save(std::move(w)); }
//     if (client->should_exit()) break; }               // after an emergency save
//
// Under `shardguard run` the client connects to the agent's control socket, follows its
// schedule and `checkpoint_now` requests, and reports begin / committed / failed. The
// checkpoint signal (default SIGUSR1) only sets a flag. Run outside shardguard it still
// works: plain checkpoints to a directory given in code, resuming from the newest complete.
//
// SIGTERM: under shardguard the client catches it by default (handle_sigterm,
// SHARDGUARD_HANDLE_SIGTERM=0 opts out). Slurm sends it to every process of a job (scancel,
// time limit, preemption, requeue) and shardguard never does, so it means "the job is being
// stopped": the handler sets a flag, the client tells the supervisor (`signal`) within about
// 100 ms and keeps training until the supervisor's checkpoint_now names the step every rank
// saves; should_exit() is then true after that save (exit 75). A `stop` that came first wins.
// Outside shardguard, where it is off unless asked for, SIGTERM saves the step at hand.
// Thread-safety: the public methods are called from the training thread; a reader thread
// and (in async mode) a save thread run inside.
#pragma once

#include <csignal>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "checkpoint/manifest.h"
#include "checkpoint/reader.h"
#include "checkpoint/writer.h"
#include "core/clock.h"
#include "core/exit_codes.h"
#include "core/filesystem.h"
#include "core/result.h"
#include "storage/s3/s3_options.h"
#include "storage/store.h"

namespace shardguard::hooks {

// The side effects the client uses: its own default bundle (the real clock and filesystem,
// and a connection to the checkpoint location made from the environment), replaced in tests.
struct ClientDeps {
  Clock* clock = nullptr;    // nullptr: RealClock
  Filesystem* fs = nullptr;  // nullptr: PosixFilesystem
  // Where checkpoints go. nullptr: checkpoint_dir's own, a directory over `fs`, or a bucket
  // reached with SHARDGUARD_S3_* (set by the supervisor) and AWS's own variables and files.
  storage::Store* store = nullptr;
};

struct ClientOptions {
  std::string job_id = "local";
  uint64_t attempt = 0;
  // Whether `attempt` counts this job's launches: SHARDGUARD_ATTEMPT, else a launcher's restart
  // count (TORCHELASTIC_RESTART_COUNT, SLURM_RESTART_COUNT). A job started by hand keeps
  // attempt 0 across its own restarts (checkpoint::WriterOptions::attempts_numbered).
  bool attempts_numbered = false;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint32_t local_rank = 0;
  std::string checkpoint_dir;    // required: a directory or s3://BUCKET/PREFIX
  std::string resume_manifest;   // empty: fresh start (or auto-resume outside shardguard)
  std::string control_socket;    // empty: no agent
  bool under_shardguard = false;  // SHARDGUARD_JOB_ID was set
  int checkpoint_signal = SIGUSR1;  // 0: none
  // Catch SIGTERM (see above). nullopt: when under shardguard (SHARDGUARD_HANDLE_SIGTERM);
  // create() resolves it. Moot when the checkpoint signal is SIGTERM itself.
  std::optional<bool> handle_sigterm;
  uint64_t every_steps = 0;      // periodic checkpoints without an agent (0: off)
  bool async = false;            // save() returns after the snapshot; the write goes on
  int io_threads = 4;
  // Size hint of the staging memory of async saves (SHARDGUARD_STAGING_BYTES): this rank's
  // tensor bytes. 0: from this rank's file in the resume manifest, or else the first save
  // sizes it (see reserve()).
  uint64_t staging_bytes = 0;
  // Data batches to skip past the resume position (SHARDGUARD_SKIP_BATCHES, set by the
  // supervisor on a relaunch after the divergence guard rolled back past bad data): the job's
  // loader draws and drops this many batches once, right after resuming.
  uint64_t skip_batches = 0;
  Duration commit_timeout = std::chrono::minutes(10);  // SHARDGUARD_COMMIT_TIMEOUT_MS
  // How to reach a bucket checkpoint_dir (SHARDGUARD_S3_*; unset ones from AWS_* as the AWS
  // CLI reads them). Unused for a directory.
  storage::s3::S3Options s3;
  ClientDeps deps;
};

struct EmergencyRequest {
  WallTime deadline;
  std::string reason;
  uint64_t at_step = 0;
};

class Client {
 public:
  // Options from the SHARDGUARD_* environment over `defaults` (DESIGN.md section 4);
  // kInvalid names a malformed variable. Connects to the control socket when one is given.
  static Result<std::unique_ptr<Client>> from_env(ClientOptions defaults = {});
  static Result<std::unique_ptr<Client>> create(ClientOptions options);
  ~Client();

  const ClientOptions& options() const;
  // The manifest to resume from: SHARDGUARD_RESUME_MANIFEST, or outside shardguard the
  // newest complete checkpoint in checkpoint_dir; nullopt for a fresh start.
  std::optional<std::string> resume_manifest() const;
  // Opens it for reading (lazy, resharding to this world size is the caller's box choice).
  // kNotFound on a fresh start.
  Result<checkpoint::CheckpointReader> open_resume() const;

  // Tells the agent this rank reached `step` (at most one message per 100 ms, sooner when a
  // reported scalar is NaN or infinite), with the scalars reported since the last one.
  void heartbeat(uint64_t step);
  // The value of a training scalar at `step` ("loss", or "grad_norm"), for the supervisor's
  // divergence guard; call it before heartbeat(step). Values are aggregated until the next
  // heartbeat goes out (first and last step, last, min, max, the first NaN or Inf), so calling
  // it every step costs no messages. kInvalid for another name.
  Status report_scalar(std::string_view name, uint64_t step, double value);
  // True when this step must be saved: the periodic schedule, or a request of the supervisor
  // (checkpoint_now) whose at_step has been reached. Under shardguard the supervisor picks
  // the step of every save it asks for; a rank that was already past it when the request
  // came says so (`passed`) and gets a later one. Outside shardguard the checkpoint signal
  // saves the step at hand. Call it once per step, with steps in increasing order.
  bool should_checkpoint(uint64_t step);
  std::optional<EmergencyRequest> emergency() const;
  // The step the supervisor's latest checkpoint request names (emergency or not), until it is
  // saved; nullopt when none is pending or this rank reported it passed it.
  std::optional<uint64_t> requested_step() const;
  // For hosts that catch the checkpoint signal themselves (Python's signal module): the
  // same as the signal arriving. The flag is process-wide, as the signal is.
  void notify_signal();
  // The same for SIGTERM, when handles_sigterm(). Async-signal-safe (sets a flag only).
  static void notify_sigterm();
  // Whether this client catches SIGTERM (options().handle_sigterm, resolved).
  bool handles_sigterm() const;
  // Puts the client's own handlers (checkpoint signal, SIGTERM) back after a host replaced
  // them; the handlers to restore at destruction stay the ones found at creation.
  Status restore_signal_handlers();
  // True once an emergency checkpoint is committed or the agent said stop: exit cleanly
  // (with shardguard::kJobExitAfterEmergency, 75, after an emergency checkpoint).
  bool should_exit() const;
  // True once an emergency checkpoint this process saved in is committed; false when
  // should_exit() is true only because the supervisor said stop (a teardown, a stale rank).
  bool emergency_committed() const;
  // Tells the supervisor that the resume checkpoint failed verification (`error` from the
  // reader: a block checksum mismatch names the file and offset). Exit with
  // shardguard::kJobExitResumeFailed afterwards: the supervisor sets the checkpoint aside
  // and relaunches from the previous one.
  void report_resume_failure(const Error& error);
  // The same, with the file and offset of the block that failed (the reader's
  // checksum_failure()), which the supervisor records as evidence. For the C ABI.
  void report_resume_failure(const Error& error, const checkpoint::ChecksumFailure& where);

  // A writer for this rank's part of `step`, with job, attempt, rank and world filled in.
  checkpoint::ShardWriter begin_save(uint64_t step);
  // Writes (sync) or snapshots and writes in the background (async), then rank 0 commits;
  // reports begin / committed / failed to the agent. In an emergency it returns once the
  // checkpoint is committed (every rank waits for the manifest, up to the deadline).
  // `reason` overrides periodic/emergency (e.g. kFinal for the last step).
  // kCancelled: the save was abandoned because another rank's save of that step failed, the
  // supervisor moved the request to a later step, or it said stop: keep training (or exit
  // if should_exit()); nothing is lost that the next save does not write.
  Status save(checkpoint::ShardWriter writer,
              std::optional<checkpoint::SaveReason> reason = std::nullopt);
  // Waits for a background save; returns its result.
  Status wait();
  // Sizes the staging memory of async saves and GPU snapshots for `bytes` of this rank's
  // tensors (plus room for the file header) and populates it in the background (2 MiB huge
  // pages), so that the first save stalls no longer than later ones; returns at once. An
  // async client does this itself at creation from the resume manifest or staging_bytes.
  // Waits for a save in flight first.
  Status reserve(uint64_t bytes);
  // The staging memory that async saves snapshot into (hooks/gpu_snapshot.h copies device
  // memory straight into it). Only while no save is in flight: call wait() first.
  checkpoint::StagingBuffer& staging();
  // Step of the last checkpoint this process saw committed (0 if none).
  uint64_t last_committed_step() const;

  struct Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::hooks
