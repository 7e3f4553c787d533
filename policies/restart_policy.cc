#include "policies/restart_policy.h"

#include <algorithm>
#include <utility>

#include "core/units.h"

namespace shardguard::policies {
namespace {

bool in_window(SteadyTime t, SteadyTime now, Duration window) { return now - t < window; }

std::string step_text(std::optional<uint64_t> step) {
  return step ? "step " + std::to_string(*step) : std::string("a fresh start");
}

}  // namespace

RestartPolicy::RestartPolicy(RestartPolicyOptions options) : options_(options) {}

RestartDecision RestartPolicy::on_exit(ExitClass c, SteadyTime now,
                                       std::optional<uint64_t> resume_step,
                                       std::optional<uint64_t> committed_step) {
  if (c == ExitClass::kSuccess) {
    streak_active_ = false;
    fallback_for_.reset();
    return {false, false, "success"};
  }
  if (c == ExitClass::kResize) return {true, false, "resize: relaunching on the new set of nodes"};
  if (c == ExitClass::kDivergence)
    return {true, false, "divergence: relaunching from the checkpoint before the anomaly"};
  const std::string name(exit_class_name(c));
  Stall stall = track_progress(c, resume_step, committed_step);
  if (stall.action == Stall::Action::kGiveUp)
    return {false, false, "no_progress: " + stall.diagnosis};

  std::deque<SteadyTime>& granted = history(c);
  const Budget& b = budget(c);
  while (!granted.empty() && !in_window(granted.front(), now, b.window)) granted.pop_front();
  const uint32_t used = restarts_in_window(c, now);
  const std::string budget_text =
      std::to_string(b.max_restarts) + " within " + format_duration(b.window);
  if (used >= b.max_restarts) {
    std::string why = name + ": restart budget exhausted (" + budget_text + ")";
    if (stall.action != Stall::Action::kNone) why += "; " + stall.diagnosis;
    return {false, false, std::move(why)};
  }
  granted.push_back(now);
  std::string why = name + ": restart " + std::to_string(used + 1) + " of " + budget_text;
  const bool previous = stall.action == Stall::Action::kPreviousCheckpoint;
  if (previous) why += "; " + stall.diagnosis;
  return {true, previous, std::move(why)};
}

RestartPolicy::Stall RestartPolicy::track_progress(ExitClass c, std::optional<uint64_t> resume_step,
                                                   std::optional<uint64_t> committed_step) {
  const bool progress = committed_step && (!resume_step || *committed_step > *resume_step);
  if (progress) {
    streak_active_ = false;
    fallback_for_.reset();
    return {};
  }
  // Only crashes and hangs point at the checkpoint or the data; a preemption or a sick node
  // neither extends the streak nor breaks it, and a pending fallback is simply retried.
  const bool failure =
      c == ExitClass::kCrash || c == ExitClass::kHang || c == ExitClass::kNoProgress;
  if (!failure) {
    if (!fallback_for_) return {};
    return {Stall::Action::kPreviousCheckpoint,
            "still to try the checkpoint before step " + std::to_string(*fallback_for_)};
  }
  if (fallback_for_) {
    return {Stall::Action::kGiveUp,
            std::to_string(streak_failures_) + " attempts resumed from step " +
                std::to_string(*fallback_for_) +
                " failed without committing a newer checkpoint, and the attempt from the "
                "previous checkpoint (" +
                step_text(resume_step) + ") failed too: poison " +
                "checkpoint or poison data at step " + std::to_string(*fallback_for_) + "?"};
  }
  if (streak_active_ && streak_step_ == resume_step) {
    ++streak_failures_;
  } else {
    streak_active_ = true;
    streak_step_ = resume_step;
    streak_failures_ = 1;
    // Earlier runs' failures from this step continue the count (once: the streak holds it).
    if (auto it = prior_failures_.find(resume_step); it != prior_failures_.end()) {
      streak_failures_ += it->second;
      prior_failures_.erase(it);
    }
  }
  if (options_.no_progress_limit == 0 || streak_failures_ < options_.no_progress_limit) return {};
  return on_stalled(resume_step);
}

RestartPolicy::Stall RestartPolicy::on_stalled(std::optional<uint64_t> resume_step) {
  const std::string count = std::to_string(streak_failures_);
  if (!resume_step) {
    return {Stall::Action::kGiveUp,
            count +
                " consecutive attempts from a fresh start failed before committing any "
                "checkpoint"};
  }
  const std::string step = std::to_string(*resume_step);
  const std::string stuck = count + " consecutive attempts resumed from step " + step +
                            " failed without committing a newer checkpoint";
  if (fallback_tried_.count(*resume_step) != 0) {
    return {Stall::Action::kGiveUp, stuck +
                                        ", and the checkpoint before it was already tried "
                                        "once: poison checkpoint or poison data at step " +
                                        step + "?"};
  }
  fallback_tried_.insert(*resume_step);
  fallback_for_ = resume_step;
  return {Stall::Action::kPreviousCheckpoint,
          stuck +
              "; retrying once from the previous checkpoint (poison checkpoint or poison "
              "data?)"};
}

void RestartPolicy::seed(std::map<std::optional<uint64_t>, uint32_t> failed_resumes,
                         std::set<uint64_t> fallback_tried) {
  prior_failures_ = std::move(failed_resumes);
  fallback_tried_.insert(fallback_tried.begin(), fallback_tried.end());
}

uint32_t RestartPolicy::restarts_in_window(ExitClass c, SteadyTime now) const {
  if (c == ExitClass::kSuccess || c == ExitClass::kResize || c == ExitClass::kDivergence) return 0;
  const Duration window = budget(c).window;
  const auto& granted = history(c);
  return static_cast<uint32_t>(std::count_if(
      granted.begin(), granted.end(), [&](SteadyTime t) { return in_window(t, now, window); }));
}

std::vector<SteadyTime> RestartPolicy::granted(ExitClass c) const {
  if (c == ExitClass::kSuccess || c == ExitClass::kResize || c == ExitClass::kDivergence) return {};
  const auto& h = history(c);
  return {h.begin(), h.end()};
}

void RestartPolicy::restore_granted(ExitClass c, const std::vector<SteadyTime>& times) {
  if (c == ExitClass::kSuccess || c == ExitClass::kResize || c == ExitClass::kDivergence) return;
  auto& h = history(c);
  h.assign(times.begin(), times.end());
  std::sort(h.begin(), h.end());
}

std::deque<SteadyTime>& RestartPolicy::history(ExitClass c) {
  return const_cast<std::deque<SteadyTime>&>(std::as_const(*this).history(c));
}

const std::deque<SteadyTime>& RestartPolicy::history(ExitClass c) const {
  switch (c) {
    case ExitClass::kHang:
      return hang_;
    case ExitClass::kInfrastructure:
      return infrastructure_;
    case ExitClass::kPreempted:
      return preempted_;
    case ExitClass::kNoSpace:
      return no_space_;
    case ExitClass::kResumeFailed:
      return resume_failed_;
    default:
      return crash_;  // kCrash, kNoProgress (kSuccess never records)
  }
}

const Budget& RestartPolicy::budget(ExitClass c) const {
  switch (c) {
    case ExitClass::kHang:
      return options_.hang;
    case ExitClass::kInfrastructure:
      return options_.infrastructure;
    case ExitClass::kPreempted:
      return options_.preempted;
    case ExitClass::kNoSpace:
      return options_.no_space;
    case ExitClass::kResumeFailed:
      return options_.resume_failed;
    default:
      return options_.crash;
  }
}

}  // namespace shardguard::policies
