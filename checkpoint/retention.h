// Which checkpoint directories to delete, and deleting them safely.
//
// Policy: keep the newest `keep_last` complete checkpoints (0: keep every complete one),
// every step divisible by `keep_every`, and every protected step (the one a running attempt
// resumed from); remove incomplete or corrupt directories older than the newest complete one.
// plan_retention() applies it to a whole listing (`shardguard ckpt gc`); the incremental
// RetentionTracker (checkpoint/retention_tracker.h) applies it per commit for a running job.
//
// Also here, pure too:
//   - plan_space_recovery(): what to free before an emergency save on a nearly full disk;
//   - plan_quarantine_gc(): quarantined steps past `quarantine_keep`.
// Deleting is crash-safe (the manifest goes first, so a half-deleted step reads as
// incomplete, never complete) and never follows a symbolic link: a step directory that is
// a link is refused (checked with lstat), so nothing outside the checkpoint directory is
// ever deleted. Thread-safety: pure functions / independent calls.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/quarantine.h"
#include "core/clock.h"
#include "core/filesystem.h"

namespace shardguard::checkpoint {

struct RetentionPolicy {
  uint32_t keep_last = 3;   // newest complete checkpoints kept (0: keep all complete)
  uint64_t keep_every = 0;  // also keep complete steps divisible by this (0: off)
  std::set<uint64_t> protected_steps;
};

struct RetentionDecision {
  CatalogEntry entry;
  bool remove = false;
  std::string why;  // "keep: newest 3", "remove: incomplete, older than step 500", ...
};

// One decision per entry of `newest_first` (list_checkpoints order).
std::vector<RetentionDecision> plan_retention(const std::vector<CatalogEntry>& newest_first,
                                              const RetentionPolicy& policy);

// Turns every planned removal of a step directory that is a symbolic link (lstat) into
// "keep", saying why. An lstat failure is an error naming the path.
Status keep_symlinked_steps(Filesystem& fs, std::vector<RetentionDecision>& plan);

// Deletes the entries marked for removal; returns how many were removed. Stops at the
// first failure, naming the directory (a symbolic link is such a failure).
Result<size_t> apply_retention(Filesystem& fs, const std::vector<RetentionDecision>& plan);

// One directory to delete, with the reason the caller logs.
struct Removal {
  enum class Kind { kIncomplete, kCorrupt, kComplete, kQuarantined };
  Kind kind = Kind::kIncomplete;
  uint64_t step = 0;
  std::string dir;
  uint64_t bytes = 0;  // what it frees, as far as known (0: unknown)
  std::string why;     // "remove step 300: incomplete, its save failed"
  std::string key{};   // kQuarantined in a bucket: the quarantine mark
};
std::string_view removal_kind_name(Removal::Kind kind);  // "incomplete", ...

// Deletes one step (or quarantined) directory crash-safely: manifest first (synced), then
// the tree, then the parent's entry synced. A missing directory is success (idempotent);
// a symbolic link or non-directory is refused with kInvalid and left alone.
Status remove_checkpoint_dir(Filesystem& fs, const std::string& dir);

// The same for a step of a Store: a directory as above; a bucket's manifest first, then
// every file of the step but a quarantined attempt's (DeleteObjects, 1,000 keys a request),
// then its unfinished multipart uploads. Removing what is not there is success.
Status remove_step(storage::Store& store, uint64_t step);
// Carries out one removal: a step (remove_step) or a quarantined one (its directory, or a
// bucket's marked files and then the mark).
Status apply_removal(storage::Store& store, const Removal& removal);
// As apply_retention() above, over a Store.
Result<size_t> apply_retention(storage::Store& store, const std::vector<RetentionDecision>& plan);

// What a step directory holds, as the space planner and the tracker see it.
struct StepSpace {
  uint64_t step = 0;
  CheckpointState state = CheckpointState::kIncomplete;
  std::string dir;
  uint64_t bytes = 0;
};

struct SpaceRecoveryPlan {
  std::vector<Removal> removals;  // in the order to apply them
  uint64_t bytes_freed = 0;       // the removals' bytes together
  bool enough = false;            // bytes_freed >= bytes_to_free
  // Everything the rules below allow to free, planned or not (when not enough: all of it).
  uint64_t bytes_reclaimable = 0;
};

// Frees at least `bytes_to_free` before a save (an emergency one, or the next one after a
// save failed on a full disk), in this order, oldest first in each group: incomplete and
// corrupt steps; complete steps beyond the newest `keep_last` (keep_every milestones
// included: a lost save costs more; keep_last 0 keeps all); then quarantined ones. Never the
// newest complete step or a protected one (the resume step, the step about to be written).
// Stops as soon as enough is planned. When everything together is not enough, only the first
// group (never resumable anyway) is planned and `enough` is false: evidence and checkpoints
// are not destroyed for a save that cannot fit. `purpose` ends each removal's reason.
SpaceRecoveryPlan plan_space_recovery(const std::vector<StepSpace>& steps,
                                      const std::vector<QuarantineEntry>& quarantined,
                                      uint64_t bytes_to_free,
                                      const std::set<uint64_t>& protected_steps, uint32_t keep_last,
                                      std::string_view purpose = "an emergency save");

// Quarantined steps set aside at least `keep` before `now`, oldest first.
std::vector<Removal> plan_quarantine_gc(const std::vector<QuarantineEntry>& quarantined,
                                        WallTime now, Duration keep);

}  // namespace shardguard::checkpoint
