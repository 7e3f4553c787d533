#include "checkpoint/retention.h"

#include "checkpoint/paths.h"

namespace shardguard::checkpoint {

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
      if (complete_seen <= policy.keep_last) {
        d.why = "keep: among the newest " + std::to_string(policy.keep_last) + " complete";
      } else if (policy.keep_every != 0 && e.step % policy.keep_every == 0) {
        d.why = "keep: step is a multiple of " + std::to_string(policy.keep_every);
      } else {
        d.remove = true;
        d.why = "remove: older than the newest " + std::to_string(policy.keep_last) + " complete";
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

Result<size_t> apply_retention(Filesystem& fs, const std::vector<RetentionDecision>& plan) {
  size_t removed = 0;
  for (const auto& d : plan) {
    if (!d.remove) continue;
    const std::string& dir = d.entry.dir;
    // Un-commit first: from here on the directory reads as incomplete.
    const std::string manifest = join_path(dir, std::string(kManifestName));
    SG_ASSIGN_OR_RETURN(bool has_manifest, fs.exists(manifest));
    if (has_manifest) {
      SG_RETURN_IF_ERROR(fs.remove(manifest));
      SG_RETURN_IF_ERROR(fs.sync_dir(dir));
    }
    SG_RETURN_IF_ERROR(fs.remove_all(dir));
    ++removed;
  }
  if (removed > 0 && !plan.empty()) SG_RETURN_IF_ERROR(fs.sync_dir(parent_dir(plan[0].entry.dir)));
  return removed;
}

}  // namespace shardguard::checkpoint
