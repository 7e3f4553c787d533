#include "agent/backoff.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace shardguard::agent {

RandomFn make_random(uint64_t seed) {
  auto engine = std::make_shared<std::mt19937_64>(seed);
  return [engine] { return std::uniform_real_distribution<double>(0.0, 1.0)(*engine); };
}

RandomFn make_random() {
  std::random_device device;
  return make_random((static_cast<uint64_t>(device()) << 32) ^ device());
}

Backoff::Backoff(BackoffConfig config, RandomFn random)
    : config_(config), random_(std::move(random)) {}

Duration Backoff::next() {
  const double initial = static_cast<double>(config_.initial.count());
  const double max = static_cast<double>(config_.max.count());
  const double base =
      std::min(max, initial * std::pow(std::max(1.0, config_.multiplier), attempts_));
  if (attempts_ < 64) ++attempts_;  // the base is capped long before; keep pow() finite
  const double jitter = std::clamp(config_.jitter, 0.0, 1.0);
  const double r = random_ ? std::clamp(random_(), 0.0, 1.0) : 0.0;
  return Duration(static_cast<Duration::rep>(base * (1.0 - jitter * r)));
}

namespace {

// A notice source must not look away longer than twice its poll interval after errors: an
// AWS spot notice comes 2 minutes ahead, and a 30 s backoff would hide a quarter of it.
BackoffConfig capped(BackoffConfig b, Duration interval) {
  if (interval <= Duration{0}) return b;
  b.max = std::min(b.max, 2 * interval);
  b.initial = std::min(b.initial, b.max);
  return b;
}

}  // namespace

PollTimer::PollTimer(TimerFactory& timers, Duration interval, BackoffConfig backoff,
                     RandomFn random)
    : timer_(timers.make_timer()),
      interval_(interval),
      backoff_(capped(backoff, interval), std::move(random)) {}

void PollTimer::after_answer(std::function<void()> poll) {
  backoff_.reset();
  after(interval_, std::move(poll));
}

void PollTimer::after_error(std::function<void()> poll) { after(backoff_.next(), std::move(poll)); }

void PollTimer::soon(std::function<void()> poll) { after(Duration(0), std::move(poll)); }

void PollTimer::after(Duration d, std::function<void()> poll) {
  last_delay_ = d;
  timer_->arm(d, std::move(poll));
}

}  // namespace shardguard::agent
