// The checkpoint directory's bookkeeping for one `shardguard run`: its lease (one job per
// directory, renewed every second), its job identity, the history that outlives runs (the
// "requeue will not help" count), incremental retention, quarantine, and a full disk: space
// recovery before an emergency save and after a save failed for lack of space, and the stop
// (exit 78) when the disk can never hold one more checkpoint. Everything slow runs on the
// worker; start-up runs before the loop serves.
// The shell tells it what happens; it decides nothing about the job.
// Thread-safety: loop thread only.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/dir_history.h"
#include "core/result.h"
#include "io/deps.h"
#include "supervisor/job_config.h"
#include "supervisor/machine_events.h"

namespace shardguard::supervisor {

struct QuarantineOutcome {
  uint64_t step = 0;
  std::string path;   // the step's new directory, when it moved
  std::string error;  // why it could not move
};

class DirectoryKeeper {
 public:
  // `store` is where the job's checkpoints live (a directory or a bucket); it must outlive
  // the keeper. A bucket has no disk to fill: the space rules below apply to directories.
  DirectoryKeeper(const io::Deps& deps, const JobConfig& config, storage::Store& store);
  ~DirectoryKeeper();

  // Takes the directory for this run: resolves the job id (the directory's own unless one is
  // given; a different one only with `take_over`), takes the lease, reads the history and
  // scans the checkpoints once. kFenced (the caller exits 78, "requeue will not help"): the
  // lease is held by another job, the job id is another job's, the last runs each exited
  // 75 without committing anything, or the disk can never hold one more checkpoint (free
  // space plus what retention may remove is less than the newest checkpoint). Returns the
  // job id.
  Result<std::string> open(const std::optional<std::string>& explicit_job_id, bool take_over,
                           Epoch first_epoch);
  // Called when the lease is lost (another run took the directory over): stop at once.
  void set_on_lost(std::function<void(const std::string& why)> on_lost);
  // Called when a save failed for lack of space and retention cannot free enough for one
  // more checkpoint (the same rule as open()): stop at once, requeueing will not help.
  void set_on_never_fits(std::function<void(const std::string& why)> on_never_fits);

  void on_launch(Epoch epoch, std::optional<uint64_t> resume_step);
  void on_save_started(uint64_t step);
  void on_committed(uint64_t step, uint64_t bytes);
  // A save of `step` failed (`no_space`: ENOSPC or EDQUOT). Its left-overs are removed; on
  // a full disk, once they are gone, retention frees room for the next checkpoint (the
  // newest one's size) in plan_space_recovery()'s order, or, when that cannot be enough,
  // on_never_fits is called. Once per step.
  void on_save_failed(uint64_t step, bool no_space = false);
  // An attempt ended: retention's bookkeeping, and the loop breaker's count in the history
  // (stored at once, so a requeue continues it).
  void on_attempt_ended(const checkpoint::AttemptEnd& end);
  // The same, from the decision core's "attempt_end" record.
  void on_attempt_ended(const EventFields& attempt_end_record);
  // The loop breaker skipped `step` once for the checkpoint before it (stored at once).
  void on_fallback_tried(uint64_t step);
  // The steps open() quarantined for `run --resume-from` (newest first).
  const std::vector<uint64_t>& rolled_back() const;
  // The history read by open() (empty before it, or when it could not be read).
  const checkpoint::DirHistory& history() const;
  // Sets the checkpoint of `step` aside (quarantine/ with the reason); `done` gets its new
  // path or the error, on the loop thread.
  void quarantine(uint64_t step, const std::string& reason,
                  std::function<void(Result<std::string>)> done);
  // Sets aside every checkpoint of step `from` or later, complete or not (the divergence
  // guard's rollback); `done` gets "step N -> path" or "step N: error" per step, on the loop.
  void quarantine_from(uint64_t from, const std::string& reason,
                       std::function<void(std::vector<QuarantineOutcome>)> done);
  // Before an emergency save: when the free space under the checkpoint directory is less than
  // one checkpoint (the newest one's size), frees space in retention's order, logging each.
  // `done` runs on the loop once the removals have ended (at once when there are none).
  void make_room(std::function<void()> done);
  // The run ends: records it in the history and releases the lease.
  void close(bool preempted, bool committed);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace shardguard::supervisor
