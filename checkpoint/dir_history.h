// Directory history: the few counts that must outlive one `shardguard run`, kept in the
// checkpoint directory (`.shardguard/history.json`) so requeues and new runs continue them:
//   (a) consecutive runs that exited 75 (preempted) without committing anything: after
//       `limit` of them (default 3) requeueing will not help, and the supervisor exits 78;
//   (b) the no-progress loop breaker (issue 14): per resume step, how many attempts resumed
//       from it ended without committed progress. An attempt that committed a newer step
//       clears its step's count; one that ended by a notice does not count.
// The update functions are pure (value in, value out); load/store do the I/O. Storing is
// atomic (temp, fsync, rename, fsync dir). Parsing is strict: a corrupt file is a kCorrupt
// error naming it, which the caller may recover from with reset_dir_history() and a warning.
// Only the directory's lease holder writes it. Thread-safety: plain values and independent
// calls.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "core/clock.h"
#include "core/filesystem.h"
#include "core/result.h"
#include "storage/store.h"

namespace shardguard::checkpoint {

inline constexpr uint32_t kDefaultFutileRequeueLimit = 3;

struct DirHistory {
  uint32_t preempted_without_commit = 0;  // (a), consecutive
  // (b): resume step (nullopt: a fresh start) -> attempts from it that ended without
  // committed progress. Bounded to the 64 highest steps.
  std::map<std::optional<uint64_t>, uint32_t> failed_resumes;
  // Steps whose previous checkpoint was already tried once by the loop breaker (bounded, 64).
  std::set<uint64_t> fallback_tried;
  int64_t updated_unix_ms = 0;  // set by store_dir_history()

  bool operator==(const DirHistory&) const = default;
};

// A run of `shardguard run` ended: `preempted` when it exits 75, `committed` when any
// checkpoint committed during it. A preempted run without a commit extends the streak;
// anything else ends it.
DirHistory on_run_end(DirHistory history, bool preempted, bool committed);

// The reason to exit 78 when the last `limit` runs were preempted without committing;
// nullopt otherwise (and always when limit is 0).
std::optional<std::string> requeue_futile(const DirHistory& history, uint32_t limit);

struct AttemptEnd {
  std::optional<uint64_t> resume_step;     // nullopt: a fresh start
  std::optional<uint64_t> committed_step;  // the newest step this attempt committed
  bool ended_by_notice = false;            // preemption / drain: not the checkpoint's fault
};

// Counts an attempt for the loop breaker (see the header comment).
DirHistory on_attempt_end(DirHistory history, const AttemptEnd& attempt);
// Attempts resumed from `resume_step` that ended without progress, as counted so far.
uint32_t failed_resumes(const DirHistory& history, std::optional<uint64_t> resume_step);
// Records that the checkpoint before `step` was tried once instead of `step`.
DirHistory on_fallback_tried(DirHistory history, uint64_t step);

// The stored history; an empty one when the file does not exist. kCorrupt names the file.
Result<DirHistory> load_dir_history(Filesystem& fs, const std::string& checkpoint_dir);
// Writes `history` with updated time `now`, atomically.
Status store_dir_history(Filesystem& fs, const std::string& checkpoint_dir, DirHistory history,
                         WallTime now);
// Recovery from a corrupt file: keeps it as `history.json.corrupt` (replacing an older one)
// for a post-mortem and stores an empty history. Returns the kept copy's path.
Result<std::string> reset_dir_history(Filesystem& fs, const std::string& checkpoint_dir,
                                      WallTime now);

// The same over a Store (a directory or a bucket).
Result<DirHistory> load_dir_history(storage::Store& store);
Status store_dir_history(storage::Store& store, DirHistory history, WallTime now);
Result<std::string> reset_dir_history(storage::Store& store, WallTime now);

}  // namespace shardguard::checkpoint
