#include "supervisor/resume_plan.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "checkpoint/paths.h"
#include "checkpoint/quarantine.h"
#include "storage/dir_store.h"
#include "supervisor/event_log.h"

namespace shardguard::supervisor {
namespace {

// A number written by us, or nothing: a hand-edited events file must not stop a run.
std::optional<uint64_t> parse_u64(const std::string& s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

ResumeChoice choose_resume(Filesystem& fs, const std::string& dir, checkpoint::Verify verify,
                           const std::vector<uint64_t>& skip, std::optional<uint64_t> skip_from) {
  storage::DirectoryStore store(fs, dir);
  return choose_resume(store, verify, skip, skip_from);
}

ResumeChoice choose_resume(storage::Store& store, checkpoint::Verify verify,
                           const std::vector<uint64_t>& skip, std::optional<uint64_t> skip_from) {
  ResumeChoice out;
  auto entries = checkpoint::list_checkpoints(store, verify);
  if (!entries.ok()) {
    out.error = entries.error().message();
    return out;
  }
  for (auto& e : *entries) {
    // The divergence guard's suspect range: not a resume candidate, and not a reason to
    // refuse a fresh start either (the ranks went bad after the newest older one).
    if (skip_from && e.step >= *skip_from) continue;
    const bool skipped = std::find(skip.begin(), skip.end(), e.step) != skip.end();
    if (e.state == checkpoint::CheckpointState::kComplete && !skipped) {
      out.chosen = std::move(e);
      break;
    }
    if (skipped) e.reason = "restarts from it made no progress";
    out.skipped.push_back(std::move(e));
  }
  return out;
}

event::ResumeFound resume_found(Epoch epoch, const ResumeChoice& choice) {
  event::ResumeFound found{epoch, std::nullopt, "", false};
  for (const auto& e : choice.skipped)
    if (e.state == checkpoint::CheckpointState::kComplete) found.skipped_complete = true;
  if (choice.chosen) {
    found.step = choice.chosen->step;
    found.manifest = join_path(choice.chosen->dir, std::string(checkpoint::kManifestName));
  }
  return found;
}

Result<std::vector<uint64_t>> roll_back(Filesystem& fs, const std::string& dir,
                                        std::optional<uint64_t> step, bool fresh, WallTime now) {
  storage::DirectoryStore store(fs, dir);
  return roll_back(store, step, fresh, now);
}

Result<std::vector<uint64_t>> roll_back(storage::Store& store, std::optional<uint64_t> step,
                                        bool fresh, WallTime now) {
  const std::string dir = store.location().str();
  SG_ASSIGN_OR_RETURN(auto steps, checkpoint::list_checkpoints(store, checkpoint::Verify::kSize));
  std::vector<uint64_t> aside;
  std::string reason;
  if (step) {
    const uint64_t target = *step;
    const std::string flag = "--resume-from " + std::to_string(target);
    auto it = std::find_if(steps.begin(), steps.end(),
                           [&](const checkpoint::CatalogEntry& e) { return e.step == target; });
    if (it == steps.end())
      return Error(ErrorCode::kInvalid, flag + ": no checkpoint of that step in '" + dir + "'");
    if (it->state != checkpoint::CheckpointState::kComplete)
      return Error(ErrorCode::kInvalid,
                   flag + ": step " + std::to_string(target) + " is " +
                       std::string(checkpoint::checkpoint_state_name(it->state)) + ": " +
                       it->reason);
    for (const auto& e : steps)
      if (e.step > target) aside.push_back(e.step);
    reason = "rolled back by shardguard run " + flag;
  } else {
    if (!steps.empty() && !fresh)
      return Error(ErrorCode::kInvalid,
                   "--resume-from none: '" + dir + "' holds " + std::to_string(steps.size()) +
                       " checkpoint(s), the newest of step " + std::to_string(steps.front().step) +
                       "; add --fresh to set them all aside (quarantined, kept as evidence)");
    for (const auto& e : steps) aside.push_back(e.step);
    reason = "set aside by shardguard run --resume-from none --fresh";
  }
  for (uint64_t s : aside) {
    SG_ASSIGN_OR_RETURN(auto q,
                        checkpoint::quarantine_step(store, s, reason, now, "shardguard run"));
    spdlog::warn("quarantined step {} ({}): now in {}", s, reason, q.dir);
  }
  return aside;
}

Epoch first_epoch(Filesystem& fs, std::span<const EventRecord> past, const std::string& dir) {
  storage::DirectoryStore store(fs, dir);
  return first_epoch(store, past);
}

Epoch first_epoch(storage::Store& store, std::span<const EventRecord> past) {
  Epoch next = 0;
  for (const auto& e : past)
    if (e.type == "launch")
      for (const auto& [k, v] : e.fields)
        if (k == "attempt")
          if (auto n = parse_u64(v); n && *n < UINT64_MAX) next = std::max(next, *n + 1);
  if (auto entries = checkpoint::list_checkpoints(store, checkpoint::Verify::kSize);
      entries.ok())
    for (const auto& e : *entries) {
      if (e.manifest) next = std::max(next, e.manifest->attempt + 1);
      // A bucket's attempts write under keys of their own: one that wrote and never
      // committed (a crash, another VM) still owns its number.
      if (!store.location().is_bucket()) continue;
      auto listing = store.list(checkpoint::step_key(e.step));
      if (!listing.ok()) continue;
      for (const auto& p : listing->prefixes)
        if (auto a = checkpoint::parse_attempt_dir_name(p.substr(p.rfind('/') + 1));
            a && *a < UINT64_MAX)
          next = std::max(next, *a + 1);
    }
  return next;
}

std::optional<Duration> last_save_time(std::span<const EventRecord> past) {
  for (auto e = past.rbegin(); e != past.rend(); ++e) {
    if (e->type != "checkpoint_committed") continue;
    for (const auto& [k, v] : e->fields) {
      if (k != "seconds") continue;
      char* end = nullptr;
      const double s = std::strtod(v.c_str(), &end);
      // A save of zero seconds was not timed (its begin was not seen): look further back.
      if (end != v.c_str() && *end == '\0' && std::isfinite(s) && s > 0 && s < 1e7)
        return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
    }
  }
  return std::nullopt;
}

}  // namespace shardguard::supervisor
