#include "checkpoint/retention.h"

#include <algorithm>

#include "checkpoint/paths.h"
#include "storage/dir_store.h"
#include "core/units.h"

namespace shardguard::checkpoint {
namespace {

std::string q(const std::string& s) { return "'" + s + "'"; }

std::string keep_last_text(uint32_t keep_last) {
  return "the newest " + std::to_string(keep_last) + " complete";
}

Removal removal_of(const StepSpace& s, Removal::Kind kind, std::string why) {
  return {kind, s.step, s.dir, s.bytes, "remove step " + std::to_string(s.step) + ": " + why, ""};
}

}  // namespace

std::vector<RetentionDecision> plan_retention(const std::vector<CatalogEntry>& newest_first,
                                              const RetentionPolicy& policy) {
  std::optional<uint64_t> newest_complete;
  for (const auto& e : newest_first)
    if (e.state == CheckpointState::kComplete) {
      newest_complete = e.step;
      break;
    }
  std::vector<RetentionDecision> out;
  uint32_t complete_seen = 0;
  for (const auto& e : newest_first) {
    RetentionDecision d{e, false, ""};
    if (policy.protected_steps.contains(e.step)) {
      d.why = "keep: protected (a running attempt resumed from it)";
    } else if (e.state == CheckpointState::kComplete) {
      ++complete_seen;
      if (policy.keep_last == 0) {
        d.why = "keep: keep_last 0 keeps every complete checkpoint";
      } else if (complete_seen <= policy.keep_last) {
        d.why = "keep: among " + keep_last_text(policy.keep_last);
      } else if (policy.keep_every != 0 && e.step % policy.keep_every == 0) {
        d.why = "keep: step is a multiple of " + std::to_string(policy.keep_every);
      } else {
        d.remove = true;
        d.why = "remove: older than " + keep_last_text(policy.keep_last);
      }
    } else if (e.state == CheckpointState::kNewer) {
      // Not ours to judge: a newer shardguard wrote it and may still resume from it.
      d.why = "keep: written by a newer shardguard";
    } else if (newest_complete && e.step < *newest_complete) {
      d.remove = true;
      d.why = "remove: " + std::string(checkpoint_state_name(e.state)) + ", older than step " +
              std::to_string(*newest_complete);
    } else {
      d.why = "keep: " + std::string(checkpoint_state_name(e.state)) +
              ", newer than any complete checkpoint (may be in progress)";
    }
    out.push_back(std::move(d));
  }
  return out;
}

Status keep_symlinked_steps(Filesystem& fs, std::vector<RetentionDecision>& plan) {
  for (auto& d : plan) {
    if (!d.remove) continue;
    SG_ASSIGN_OR_RETURN(PathKind kind, fs.path_kind(d.entry.dir));
    if (kind != PathKind::kSymlink) continue;
    d.remove = false;
    d.why = "keep: a symbolic link (retention never follows or deletes links)";
  }
  return {};
}

Status remove_checkpoint_dir(Filesystem& fs, const std::string& dir) {
  SG_ASSIGN_OR_RETURN(PathKind kind, fs.path_kind(dir));
  if (kind == PathKind::kMissing) return {};
  if (kind == PathKind::kSymlink)
    return Error(ErrorCode::kInvalid,
                 "not removed: " + q(dir) + " is a symbolic link (retention never follows links)");
  if (kind != PathKind::kDirectory)
    return Error(ErrorCode::kInvalid, "not removed: " + q(dir) + " is not a directory");
  // Un-commit first: from here on the directory reads as incomplete.
  const std::string manifest = join_path(dir, std::string(kManifestName));
  SG_ASSIGN_OR_RETURN(PathKind manifest_kind, fs.path_kind(manifest));
  if (manifest_kind != PathKind::kMissing) {
    SG_RETURN_IF_ERROR(fs.remove(manifest));  // unlink: a link here is removed, not followed
    SG_RETURN_IF_ERROR(fs.sync_dir(dir));
  }
  SG_RETURN_IF_ERROR(fs.remove_all(dir));
  return fs.sync_dir(parent_dir(dir));
}

Status remove_step(storage::Store& store, uint64_t step) {
  if (auto* dir = store.as_directory())
    return remove_checkpoint_dir(dir->fs(), dir->path(step_key(step)));
  // Un-commit first: from here on the step reads as incomplete, never as complete.
  SG_RETURN_IF_ERROR(store.remove(manifest_key(step)));
  SG_ASSIGN_OR_RETURN(auto marked, quarantined_attempts(store, step));
  SG_ASSIGN_OR_RETURN(auto objects, store.list_all(step_key(step)));
  std::vector<std::string> keys;
  for (auto& o : objects) {
    const std::string rest = o.key.substr(step_key(step).size() + 1);
    const auto attempt = parse_attempt_dir_name(rest.substr(0, rest.find('/')));
    if (attempt && marked.contains(*attempt)) continue;  // evidence, until its own gc
    keys.push_back(std::move(o.key));
  }
  SG_RETURN_IF_ERROR(store.remove_many(keys));
  SG_RETURN_IF_ERROR(store.abort_uploads(step_key(step) + "/"));
  return {};
}

Status apply_removal(storage::Store& store, const Removal& r) {
  if (r.kind != Removal::Kind::kQuarantined) return remove_step(store, r.step);
  if (auto* dir = store.as_directory()) return remove_checkpoint_dir(dir->fs(), r.dir);
  SG_ASSIGN_OR_RETURN(auto all, list_quarantined(store));
  for (const auto& e : all)
    if (e.key == r.key) return remove_quarantined(store, e);
  return {};  // gone already
}

Result<size_t> apply_retention(storage::Store& store, const std::vector<RetentionDecision>& plan) {
  if (auto* dir = store.as_directory()) return apply_retention(dir->fs(), plan);
  size_t removed = 0;
  for (const auto& d : plan) {
    if (!d.remove) continue;
    SG_RETURN_IF_ERROR(remove_step(store, d.entry.step));
    ++removed;
  }
  return removed;
}

Result<size_t> apply_retention(Filesystem& fs, const std::vector<RetentionDecision>& plan) {
  size_t removed = 0;
  for (const auto& d : plan) {
    if (!d.remove) continue;
    SG_RETURN_IF_ERROR(remove_checkpoint_dir(fs, d.entry.dir));
    ++removed;
  }
  return removed;
}

std::string_view removal_kind_name(Removal::Kind kind) {
  switch (kind) {
    case Removal::Kind::kIncomplete:
      return "incomplete";
    case Removal::Kind::kCorrupt:
      return "corrupt";
    case Removal::Kind::kComplete:
      return "complete";
    case Removal::Kind::kQuarantined:
      return "quarantined";
  }
  return "incomplete";
}

SpaceRecoveryPlan plan_space_recovery(const std::vector<StepSpace>& steps,
                                      const std::vector<QuarantineEntry>& quarantined,
                                      uint64_t bytes_to_free,
                                      const std::set<uint64_t>& protected_steps, uint32_t keep_last,
                                      std::string_view purpose) {
  std::vector<const StepSpace*> by_age;  // oldest first
  for (const auto& s : steps) by_age.push_back(&s);
  std::sort(by_age.begin(), by_age.end(),
            [](const StepSpace* a, const StepSpace* b) { return a->step < b->step; });

  // Complete steps that stay whatever happens: the newest (resume needs one) and the
  // newest keep_last (keep_last 0: all of them).
  std::set<uint64_t> kept_complete;
  uint32_t complete_seen = 0;
  for (auto it = by_age.rbegin(); it != by_age.rend(); ++it) {
    if ((*it)->state != CheckpointState::kComplete) continue;
    ++complete_seen;
    if (complete_seen == 1 || keep_last == 0 || complete_seen <= keep_last)
      kept_complete.insert((*it)->step);
  }
  const std::string for_what = " for " + std::string(purpose);

  // Every candidate in order; the plan is the shortest prefix that frees enough.
  std::vector<Removal> candidates;
  for (const StepSpace* s : by_age) {
    if (s->state == CheckpointState::kComplete || protected_steps.contains(s->step)) continue;
    const bool corrupt = s->state == CheckpointState::kCorrupt;
    candidates.push_back(removal_of(*s,
                                    corrupt ? Removal::Kind::kCorrupt : Removal::Kind::kIncomplete,
                                    std::string(checkpoint_state_name(s->state)) + ", freeing " +
                                        format_size(s->bytes) + for_what));
  }
  const size_t garbage_only = candidates.size();
  for (const StepSpace* s : by_age) {
    if (s->state != CheckpointState::kComplete || kept_complete.contains(s->step) ||
        protected_steps.contains(s->step))
      continue;
    candidates.push_back(removal_of(*s, Removal::Kind::kComplete,
                                    "complete, older than " + keep_last_text(keep_last) +
                                        ", freeing " + format_size(s->bytes) + for_what));
  }
  std::vector<const QuarantineEntry*> q_by_age;
  for (const auto& e : quarantined) q_by_age.push_back(&e);
  std::stable_sort(q_by_age.begin(), q_by_age.end(), [](const auto* a, const auto* b) {
    return a->quarantined_unix_ms < b->quarantined_unix_ms;
  });
  for (const QuarantineEntry* e : q_by_age)
    candidates.push_back({Removal::Kind::kQuarantined, e->step, e->dir, e->bytes,
                          "remove quarantined step " + std::to_string(e->step) + " (" + e->reason +
                              "), freeing " + format_size(e->bytes) + for_what,
                          e->key});

  SpaceRecoveryPlan plan;
  for (const auto& r : candidates) plan.bytes_reclaimable += r.bytes;
  plan.enough = bytes_to_free == 0;
  uint64_t garbage_bytes = 0;
  for (size_t i = 0; i < candidates.size() && !plan.enough; ++i) {
    plan.bytes_freed += candidates[i].bytes;
    plan.removals.push_back(std::move(candidates[i]));
    plan.enough = plan.bytes_freed >= bytes_to_free;
    if (i + 1 == garbage_only) garbage_bytes = plan.bytes_freed;
  }
  if (!plan.enough) {
    plan.removals.resize(std::min(plan.removals.size(), garbage_only));
    plan.bytes_freed = garbage_bytes;
  }
  return plan;
}

std::vector<Removal> plan_quarantine_gc(const std::vector<QuarantineEntry>& quarantined,
                                        WallTime now, Duration keep) {
  std::vector<const QuarantineEntry*> by_age;
  for (const auto& e : quarantined) by_age.push_back(&e);
  std::stable_sort(by_age.begin(), by_age.end(), [](const auto* a, const auto* b) {
    return a->quarantined_unix_ms < b->quarantined_unix_ms;
  });
  std::vector<Removal> out;
  const int64_t cutoff =
      to_unix_ms(now) - std::chrono::duration_cast<std::chrono::milliseconds>(keep).count();
  for (const QuarantineEntry* e : by_age) {
    if (e->quarantined_unix_ms > cutoff) continue;
    out.push_back({Removal::Kind::kQuarantined, e->step, e->dir, e->bytes,
                   "remove quarantined step " + std::to_string(e->step) + ": kept " +
                       format_duration(keep) + " (quarantine_keep), reason was: " + e->reason,
                   e->key});
  }
  return out;
}

}  // namespace shardguard::checkpoint
