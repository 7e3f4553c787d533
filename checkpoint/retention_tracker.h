// Incremental retention for a running job: O(new checkpoints) per commit, not O(all).
// Listing and size-verifying every kept step on each commit cost the supervisor 1.7 -> 8.3 ms
// of CPU per commit and 7.6 -> 9.8 MB of RSS at 42 kept checkpoints; the tracker scans the
// directory once, then is told of each save that starts, commits or fails, and decides from
// what it already knows. Kept checkpoints are never read again.
//
// Rules (checkpoint/retention.h), plus what only a running job knows:
//   - a commit pushes the oldest of the newest `keep_last` complete steps out of the window;
//     it is removed unless keep_every or protection keeps it (keep_last 0: keep all);
//   - incomplete steps of failed saves and of older attempts are removed (also with
//     keep_last 0), but never a step being written now (on_save_started .. committed/failed);
//   - corrupt steps older than the newest complete one are removed; newer ones are kept as
//     evidence (the caller may quarantine them);
//   - protected steps (the resume step) are never removed while protected, and take no
//     place among the newest keep_last (as in plan_retention()). Protect before the scan
//     (RetentionPolicy::protected_steps) or before the step falls out of the window.
// Each event returns the removals newly due. The caller applies them (remove_checkpoint_dir)
// on its worker and reports each outcome with on_removed(); a failed one is due again at the
// next event. Step directories created without on_save_started() (a save the supervisor never
// heard of) are unknown until the next scan, so they are never removed under a writer.
//
// Thread-safety: none; one tracker belongs to one supervisor loop.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/retention.h"
#include "core/filesystem.h"
#include "core/result.h"

namespace shardguard::checkpoint {

class RetentionTracker {
 public:
  RetentionTracker(std::string checkpoint_dir, RetentionPolicy policy);

  // The one full scan: every step directory classified (`verify`), incomplete ones measured,
  // symbolic links noted (never removed). Call before the first launch; every incomplete
  // step found is then a left-over of an older run.
  Status scan(Filesystem& fs, Verify verify = Verify::kSize);
  // The same over a Store (a directory or a bucket; the tracker's directory is the store's).
  Status scan(storage::Store& store, Verify verify = Verify::kSize);
  // As scan(), from a listing made elsewhere (sizes of incomplete steps unknown: 0).
  void seed(const std::vector<CatalogEntry>& newest_first);

  // The current attempt began writing `step`: never removed until it commits or fails.
  void on_save_started(uint64_t step);
  // `step` committed; `bytes` from its manifest (total_bytes()).
  std::vector<Removal> on_committed(uint64_t step, uint64_t bytes);
  // The save of `step` failed and no rank writes it any more (the commit was abandoned by
  // all): its directory is a left-over. `bytes_left` as measured, 0 if unknown.
  std::vector<Removal> on_save_failed(uint64_t step, uint64_t bytes_left = 0);
  // The attempt ended: steps still in flight were abandoned and become left-overs.
  std::vector<Removal> on_attempt_ended();
  // Protection of the resume step; unprotecting may make it due.
  void protect(uint64_t step);
  std::vector<Removal> unprotect(uint64_t step);
  // The outcome of a removal handed out earlier, or made by space recovery
  // (plan_space_recovery() from steps()). A refused one (a symbolic link, not a directory:
  // kInvalid) is never handed out again; other failures are due again.
  void on_removed(uint64_t step, const Status& outcome);

  // Removals due but not yet handed out (after failures), handing them out.
  std::vector<Removal> take_due();
  // Every known step, newest first, for plan_space_recovery().
  std::vector<StepSpace> steps() const;
  const std::set<uint64_t>& in_flight() const { return in_flight_; }
  std::optional<uint64_t> newest_complete() const { return newest_complete_; }

 private:
  struct Step {
    StepSpace space;
    bool symlink = false;
    std::string why;  // why it is due, when it is
  };

  void add(const CatalogEntry& e, uint64_t bytes, bool symlink);
  void window_push(uint64_t step);
  void consider_complete(uint64_t step);                         // out of the window: due or kept
  void consider_garbage(uint64_t step, const std::string& why);  // incomplete / corrupt
  void make_due(uint64_t step, std::string why);
  void due_older_corrupt();

  std::string dir_;
  RetentionPolicy policy_;
  std::map<uint64_t, Step> steps_;   // every known step directory
  std::set<uint64_t> window_;        // the newest keep_last complete steps
  std::set<uint64_t> held_;          // complete and protected: outside the window
  std::set<uint64_t> corrupt_kept_;  // corrupt, newer than the newest complete
  std::set<uint64_t> in_flight_;
  std::set<uint64_t> due_;     // to hand out
  std::set<uint64_t> handed_;  // handed out, outcome not yet reported
  std::optional<uint64_t> newest_complete_;
};

}  // namespace shardguard::checkpoint
