// Whether to relaunch after an attempt ended, and from which checkpoint. Each exit class has
// its own restart budget over a sliding time window, so preemptions never burn the crash
// budget. A no-progress detector watches crash and hang exits: when attempts keep resuming
// from the same step and die before committing anything newer, it asks for one attempt from
// the checkpoint before that step, then gives up naming the step (poison checkpoint or
// poison data). Backoff is separate (policies/backoff.h).
//
// Pure decisions: time is an argument, nothing is read or written. Thread-safety: none; one
// object belongs to one supervisor.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <vector>
#include <string>

#include "core/clock.h"
#include "policies/exit_class.h"

namespace shardguard::policies {

struct Budget {
  uint32_t max_restarts;  // restarts allowed within any `window`
  Duration window;
};

struct RestartPolicyOptions {
  Budget crash, hang, infrastructure, preempted;  // kNoProgress exits use the crash budget
  uint32_t no_progress_limit = 3;  // consecutive failures from one step before acting
  Budget no_space{3, std::chrono::hours(1)};
  Budget resume_failed{8, std::chrono::hours(1)};  // each one quarantines a checkpoint
};

struct RestartDecision {
  bool restart;
  bool use_previous_checkpoint;  // skip the newest complete checkpoint once
  std::string reason;            // why give up / why restart, human-readable
};

class RestartPolicy {
 public:
  explicit RestartPolicy(RestartPolicyOptions options);

  // Records an exit of class `c` at `now` after an attempt that resumed from `resume_step`
  // (nullopt: fresh start) and whose last committed step is `committed_step` (nullopt: none),
  // and says what to do. Give-up reasons start with the class name ("crash: ...",
  // "no_progress: ..."); kSuccess answers restart=false, reason "success"; kResize always
  // restarts and uses no budget.
  RestartDecision on_exit(ExitClass c, SteadyTime now, std::optional<uint64_t> resume_step,
                          std::optional<uint64_t> committed_step);

  // Carries the loop breaker over from earlier runs on the checkpoint directory
  // (checkpoint/dir_history.h): attempts from each resume step that failed without progress
  // (a streak that starts at such a step starts from that count), and steps whose previous
  // checkpoint was already tried once. Call before the first on_exit.
  void seed(std::map<std::optional<uint64_t>, uint32_t> failed_resumes,
            std::set<uint64_t> fallback_tried);

  // Restarts granted for class `c` within its window ending at `now`.
  uint32_t restarts_in_window(ExitClass c, SteadyTime now) const;
  // The times restarts of class `c` were granted (oldest first), to be carried over to a
  // successor coordinator; and the way to hand them to it.
  std::vector<SteadyTime> granted(ExitClass c) const;
  void restore_granted(ExitClass c, const std::vector<SteadyTime>& times);

 private:
  // What the no-progress detector wants after a failed attempt.
  struct Stall {
    enum class Action { kNone, kPreviousCheckpoint, kGiveUp } action = Action::kNone;
    std::string diagnosis;
  };

  Stall track_progress(ExitClass c, std::optional<uint64_t> resume_step,
                       std::optional<uint64_t> committed_step);
  Stall on_stalled(std::optional<uint64_t> resume_step);
  std::deque<SteadyTime>& history(ExitClass c);
  const std::deque<SteadyTime>& history(ExitClass c) const;
  const Budget& budget(ExitClass c) const;

  RestartPolicyOptions options_;
  std::deque<SteadyTime> crash_, hang_, infrastructure_, preempted_, no_space_,
      resume_failed_;  // restarts granted

  // No-progress state: consecutive failures without progress, all resumed from streak_step_.
  bool streak_active_ = false;
  std::optional<uint64_t> streak_step_;
  uint32_t streak_failures_ = 0;
  // Set while the attempt on the checkpoint before `*fallback_for_` is pending or running.
  std::optional<uint64_t> fallback_for_;
  std::set<uint64_t> fallback_tried_;  // steps already skipped once
  std::map<std::optional<uint64_t>, uint32_t> prior_failures_;  // from earlier runs (seed)
};

}  // namespace shardguard::policies
