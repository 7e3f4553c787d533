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
#include "core/result.h"

namespace shardguard::hooks {

// What a job exits with after an emergency checkpoint: EX_TEMPFAIL, "try again", so that
// a supervisor or scheduler that sees only the exit code still requeues it.
inline constexpr int kJobExitAfterEmergency = 75;

struct ClientOptions {
  std::string job_id = "local";
  uint64_t attempt = 0;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint32_t local_rank = 0;
  std::string checkpoint_dir;    // required
  std::string resume_manifest;   // empty: fresh start (or auto-resume outside shardguard)
  std::string control_socket;    // empty: no agent
  bool under_shardguard = false;  // SHARDGUARD_JOB_ID was set
  int checkpoint_signal = SIGUSR1;  // 0: none
  uint64_t every_steps = 0;      // periodic checkpoints without an agent (0: off)
  bool async = false;            // save() returns after the snapshot; the write goes on
  int io_threads = 4;
  Duration commit_timeout = std::chrono::minutes(10);
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

  // Tells the agent this rank reached `step` (at most one message per 100 ms).
  void heartbeat(uint64_t step);
  // True when this step must be saved: the periodic schedule, or an emergency (signal or
  // checkpoint_now) whose at_step has been reached.
  bool should_checkpoint(uint64_t step);
  std::optional<EmergencyRequest> emergency() const;
  // For hosts that catch the checkpoint signal themselves (Python's signal module): the
  // same as the signal arriving. The flag is process-wide, as the signal is.
  void notify_signal();
  // True once an emergency checkpoint is committed or the agent said stop: exit cleanly.
  bool should_exit() const;

  // A writer for this rank's part of `step`, with job, attempt, rank and world filled in.
  checkpoint::ShardWriter begin_save(uint64_t step);
  // Writes (sync) or snapshots and writes in the background (async), then rank 0 commits;
  // reports begin / committed / failed to the agent. In an emergency it returns once the
  // checkpoint is committed (every rank waits for the manifest, up to the deadline).
  // `reason` overrides periodic/emergency (e.g. kFinal for the last step).
  Status save(checkpoint::ShardWriter writer,
              std::optional<checkpoint::SaveReason> reason = std::nullopt);
  // Waits for a background save; returns its result.
  Status wait();
  // Step of the last checkpoint this process saw committed (0 if none).
  uint64_t last_committed_step() const;

  struct Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::hooks
