#include "checkpoint/retention_tracker.h"

#include <algorithm>

#include "checkpoint/paths.h"
#include "storage/dir_store.h"

namespace shardguard::checkpoint {

RetentionTracker::RetentionTracker(std::string checkpoint_dir, RetentionPolicy policy)
    : dir_(std::move(checkpoint_dir)), policy_(std::move(policy)) {}

Status RetentionTracker::scan(Filesystem& fs, Verify verify) {
  storage::DirectoryStore store(fs, dir_);
  return scan(store, verify);
}

Status RetentionTracker::scan(storage::Store& store, Verify verify) {
  auto* dir = store.as_directory();
  if (dir == nullptr) {
    // A bucket: no links; an incomplete step's bytes are what a listing of it sums.
    SG_ASSIGN_OR_RETURN(auto entries, list_checkpoints(store, verify));
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
      uint64_t bytes = 0;
      if (it->state == CheckpointState::kComplete) {
        bytes = it->manifest->total_bytes();
      } else {
        SG_ASSIGN_OR_RETURN(auto objects, store.list_all(step_key(it->step)));
        for (const auto& o : objects) bytes += o.size;
      }
      add(*it, bytes, false);
    }
    due_older_corrupt();
    return {};
  }
  Filesystem& fs = dir->fs();
  SG_ASSIGN_OR_RETURN(auto entries, list_checkpoints(store, verify));
  // Oldest first, so the window fills as it would have commit by commit.
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    SG_ASSIGN_OR_RETURN(PathKind kind, fs.path_kind(it->dir));
    uint64_t bytes = 0;
    if (it->state == CheckpointState::kComplete) {
      bytes = it->manifest->total_bytes();
    } else if (kind == PathKind::kDirectory) {
      SG_ASSIGN_OR_RETURN(bytes, tree_bytes(fs, it->dir));
    }
    add(*it, bytes, kind == PathKind::kSymlink);
  }
  due_older_corrupt();
  return {};
}

void RetentionTracker::seed(const std::vector<CatalogEntry>& newest_first) {
  for (auto it = newest_first.rbegin(); it != newest_first.rend(); ++it)
    add(*it,
        it->manifest && it->state == CheckpointState::kComplete ? it->manifest->total_bytes() : 0,
        false);
  due_older_corrupt();
}

void RetentionTracker::add(const CatalogEntry& e, uint64_t bytes, bool symlink) {
  steps_[e.step] = Step{{e.step, e.state, e.dir, bytes}, symlink, ""};
  switch (e.state) {
    case CheckpointState::kComplete:
      newest_complete_ = std::max(newest_complete_.value_or(e.step), e.step);
      window_push(e.step);
      break;
    case CheckpointState::kIncomplete:
      consider_garbage(e.step, "incomplete, left by an earlier run");
      break;
    case CheckpointState::kCorrupt:
      corrupt_kept_.insert(e.step);  // due_older_corrupt() decides once all are known
      break;
    case CheckpointState::kNewer:
      break;  // a newer shardguard's: never ours to remove
  }
}

void RetentionTracker::window_push(uint64_t step) {
  if (policy_.keep_last == 0) return;  // every complete checkpoint stays
  // A protected step is kept anyway and takes no place among the newest keep_last (as in
  // plan_retention()).
  if (policy_.protected_steps.contains(step)) {
    held_.insert(step);
    return;
  }
  window_.insert(step);
  if (window_.size() <= policy_.keep_last) return;
  const uint64_t oldest = *window_.begin();
  window_.erase(window_.begin());
  consider_complete(oldest);
}

void RetentionTracker::consider_complete(uint64_t step) {
  if (policy_.protected_steps.contains(step)) {
    held_.insert(step);
    return;
  }
  if (policy_.keep_every != 0 && step % policy_.keep_every == 0) return;  // kept for good
  make_due(step,
           "complete, older than the newest " + std::to_string(policy_.keep_last) + " complete");
}

void RetentionTracker::consider_garbage(uint64_t step, const std::string& why) {
  if (in_flight_.contains(step) || policy_.protected_steps.contains(step)) return;
  make_due(step, why);
}

void RetentionTracker::make_due(uint64_t step, std::string why) {
  auto it = steps_.find(step);
  if (it == steps_.end() || it->second.symlink || handed_.contains(step)) return;
  it->second.why = std::move(why);
  due_.insert(step);
}

void RetentionTracker::due_older_corrupt() {
  const auto newest = newest_complete_;
  if (!newest) return;
  for (auto it = corrupt_kept_.begin(); it != corrupt_kept_.end() && *it < *newest;) {
    consider_garbage(*it, "corrupt, older than step " + std::to_string(*newest));
    it = corrupt_kept_.erase(it);
  }
}

void RetentionTracker::on_save_started(uint64_t step) {
  in_flight_.insert(step);
  // An earlier run's left-over of the same step is taken over by the writer, not removed.
  due_.erase(step);
}

std::vector<Removal> RetentionTracker::on_committed(uint64_t step, uint64_t bytes) {
  in_flight_.erase(step);
  due_.erase(step);
  corrupt_kept_.erase(step);
  const std::string dir = join_path(dir_, step_dir_name(step));
  steps_[step] = Step{{step, CheckpointState::kComplete, dir, bytes}, false, ""};
  newest_complete_ = std::max(newest_complete_.value_or(step), step);
  window_push(step);
  due_older_corrupt();
  return take_due();
}

std::vector<Removal> RetentionTracker::on_save_failed(uint64_t step, uint64_t bytes_left) {
  in_flight_.erase(step);
  auto it = steps_.find(step);
  if (it != steps_.end() && it->second.space.state == CheckpointState::kComplete)
    return take_due();  // committed after all (another rank's report came late)
  const std::string dir = join_path(dir_, step_dir_name(step));
  steps_[step] = Step{{step, CheckpointState::kIncomplete, dir, bytes_left}, false, ""};
  consider_garbage(step, "incomplete, its save failed");
  return take_due();
}

std::vector<Removal> RetentionTracker::on_attempt_ended() {
  const std::set<uint64_t> abandoned = std::move(in_flight_);
  in_flight_.clear();
  for (uint64_t step : abandoned) {
    auto it = steps_.find(step);
    if (it != steps_.end() && it->second.space.state == CheckpointState::kComplete) continue;
    const std::string dir = join_path(dir_, step_dir_name(step));
    steps_[step] = Step{{step, CheckpointState::kIncomplete, dir, 0}, false, ""};
    consider_garbage(step, "incomplete, abandoned when its attempt ended");
  }
  return take_due();
}

void RetentionTracker::protect(uint64_t step) {
  policy_.protected_steps.insert(step);
  due_.erase(step);
  if (window_.erase(step) != 0) held_.insert(step);
}

std::vector<Removal> RetentionTracker::unprotect(uint64_t step) {
  policy_.protected_steps.erase(step);
  auto it = steps_.find(step);
  if (it != steps_.end()) {
    if (held_.erase(step) != 0) {
      window_push(step);  // back among the newest, or out of them
    } else if (it->second.space.state == CheckpointState::kIncomplete) {
      consider_garbage(step, "incomplete, no longer protected");
    } else if (it->second.space.state == CheckpointState::kCorrupt) {
      corrupt_kept_.insert(step);
      due_older_corrupt();
    }
  }
  return take_due();
}

void RetentionTracker::on_removed(uint64_t step, const Status& outcome) {
  handed_.erase(step);
  if (outcome.ok()) {
    // Space recovery removes steps the tracker did not hand out, some of them due or in the
    // window already: the step is gone from every set, or take_due() would hand out a step
    // it no longer knows.
    steps_.erase(step);
    held_.erase(step);
    due_.erase(step);
    window_.erase(step);
    corrupt_kept_.erase(step);
    return;
  }
  auto it = steps_.find(step);
  if (it == steps_.end()) return;
  if (outcome.error().code() == ErrorCode::kInvalid) {
    it->second.symlink = true;  // a link or not a directory: left alone for good
    return;
  }
  due_.insert(step);
}

std::vector<Removal> RetentionTracker::take_due() {
  std::vector<Removal> out;
  for (uint64_t step : due_) {  // ascending: oldest first
    const Step& s = steps_.at(step);
    Removal::Kind kind = Removal::Kind::kComplete;
    if (s.space.state == CheckpointState::kIncomplete) kind = Removal::Kind::kIncomplete;
    if (s.space.state == CheckpointState::kCorrupt) kind = Removal::Kind::kCorrupt;
    out.push_back({kind, step, s.space.dir, s.space.bytes,
                   "remove step " + std::to_string(step) + ": " + s.why, ""});
    handed_.insert(step);
  }
  due_.clear();
  return out;
}

std::vector<StepSpace> RetentionTracker::steps() const {
  std::vector<StepSpace> out;
  out.reserve(steps_.size());
  for (auto it = steps_.rbegin(); it != steps_.rend(); ++it) out.push_back(it->second.space);
  return out;
}

}  // namespace shardguard::checkpoint
