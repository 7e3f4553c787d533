// Jittered exponential backoff (as envoy's backoff_strategy) and the poll timer the notice
// sources build on: wait the poll interval after an answer, a growing jittered delay after
// each "no information" answer, so a flaky endpoint is neither hammered nor abandoned.
//
// Thread-safety: none; each object belongs to one source on the loop thread. The RandomFn
// from make_random() must not be shared across threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/clock.h"

namespace shardguard::agent {

// Uniform doubles in [0, 1).
using RandomFn = std::function<double()>;

// A std::mt19937_64 seeded with `seed`, as a RandomFn (tests pass a fixed seed).
RandomFn make_random(uint64_t seed);
// Seeded from std::random_device: for production.
RandomFn make_random();

struct BackoffConfig {
  Duration initial = std::chrono::seconds(1);
  Duration max = std::chrono::seconds(30);
  double multiplier = 2.0;
  double jitter = 0.5;  // each delay is drawn from [base * (1 - jitter), base]
};

class Backoff {
 public:
  Backoff(BackoffConfig config, RandomFn random);
  // The delay before the next retry; grows with each call until reset(). Never above max.
  Duration next();
  void reset() { attempts_ = 0; }
  int attempts() const { return attempts_; }

 private:
  BackoffConfig config_;
  RandomFn random_;
  int attempts_ = 0;
};

// One timer that runs a poll function: after_answer() waits `interval` and resets the
// backoff; after_error() waits the next backoff delay, never more than 2 x `interval`;
// soon() runs it on the next turn.
class PollTimer {
 public:
  PollTimer(TimerFactory& timers, Duration interval, BackoffConfig backoff, RandomFn random);
  void after_answer(std::function<void()> poll);
  void after_error(std::function<void()> poll);
  void soon(std::function<void()> poll);
  void after(Duration d, std::function<void()> poll);
  void reset_backoff() { backoff_.reset(); }
  void cancel() { timer_->cancel(); }
  bool armed() const { return timer_->armed(); }
  Duration interval() const { return interval_; }
  // Delay chosen by the last after_*/soon call (for tests and logs).
  Duration last_delay() const { return last_delay_; }
  int failures() const { return backoff_.attempts(); }

 private:
  std::unique_ptr<Timer> timer_;
  Duration interval_;
  Backoff backoff_;
  Duration last_delay_{0};
};

}  // namespace shardguard::agent
