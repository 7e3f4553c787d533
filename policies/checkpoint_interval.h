// How often to checkpoint in `interval = "auto"` mode: the Young/Daly optimum
// sqrt(2 * checkpoint cost * MTBF), fed by estimates of both taken from the run itself.
// Pure arithmetic; times are arguments. Thread-safety: none; each estimator belongs to one
// supervisor.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <optional>
#include <vector>

#include "core/clock.h"

namespace shardguard::policies {

// How periodic checkpoints are scheduled: every N steps (by the clients), every fixed time, or
// at the Young/Daly optimum from measured costs.
enum class IntervalMode { kSteps, kTime, kAuto };

// sqrt(2 * checkpoint_cost * mtbf), clamped to [min_interval, max_interval]. Zero or negative
// inputs give min_interval.
Duration young_daly_interval(Duration checkpoint_cost, Duration mtbf,
                             Duration min_interval = std::chrono::seconds(30),
                             Duration max_interval = std::chrono::hours(24));

// Mean time between failures observed over a run: time since set_start() (or since the
// first failure when no start was set) divided by the failures counted in it.
class FailureRateEstimator {
 public:
  void record_failure(SteadyTime t);
  // The observed MTBF, or `configured` until at least 2 failures were recorded.
  Duration mtbf(SteadyTime now, Duration configured) const;
  void set_start(SteadyTime t) { start_ = t; }

 private:
  std::optional<SteadyTime> start_;
  std::optional<SteadyTime> first_failure_;
  size_t failures_ = 0;
};

// Checkpoint cost from the last few begin-to-commit durations: their median, so one cold
// first save or one slow storage moment does not swing the interval.
class CheckpointCostEstimator {
 public:
  static constexpr size_t kSamples = 8;

  void record(Duration begin_to_commit);
  // The median of the last kSamples recorded durations, or `fallback` when none were.
  Duration estimate(Duration fallback) const;

 private:
  std::deque<Duration> recent_;
};

}  // namespace shardguard::policies
