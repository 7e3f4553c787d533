#include "policies/checkpoint_interval.h"

#include <catch2/catch.hpp>

using namespace std::chrono_literals;
using namespace shardguard::policies;
using shardguard::Duration;
using shardguard::SteadyTime;

TEST_CASE("young_daly_interval is sqrt(2 * cost * mtbf), clamped") {
  const auto [cost, mtbf, expected] = GENERATE(table<Duration, Duration, Duration>({
      {Duration(30s), Duration(4h), Duration(929516ms)},     // sqrt(2*30*14400) = 929.516s
      {Duration(1min), Duration(24h), Duration(3219938ms)},  // sqrt(2*60*86400) = 3219.938s
      {Duration(8s), Duration(1h), Duration(240s)},          // sqrt(57600)
      {Duration(1s), Duration(1min), Duration(30s)},         // 10.95s: clamped to min
      {Duration(1h), Duration(24h * 365), Duration(24h)},    // 5.5 days: clamped to max
      {Duration(0s), Duration(4h), Duration(30s)},           // free checkpoints: min
      {Duration(30s), Duration(0s), Duration(30s)},
  }));
  CHECK(std::chrono::abs(young_daly_interval(cost, mtbf) - expected) < 1ms);
}

TEST_CASE("young_daly_interval honours explicit bounds") {
  CHECK(young_daly_interval(8s, 1h, 5min, 10min) == 5min);
  CHECK(young_daly_interval(8s, 1h, 1s, 2min) == 2min);
}

TEST_CASE("failure rate falls back to the configured mtbf until two failures") {
  const SteadyTime t0 = SteadyTime(100h);
  FailureRateEstimator f;
  f.set_start(t0);
  CHECK(f.mtbf(t0 + 1h, 4h) == 4h);
  f.record_failure(t0 + 1h);
  CHECK(f.mtbf(t0 + 2h, 4h) == 4h);
  f.record_failure(t0 + 2h);
  CHECK(f.mtbf(t0 + 3h, 4h) == 90min);  // 3h over 2 failures
}

TEST_CASE("failure rate without a start counts from the first failure") {
  const SteadyTime t0 = SteadyTime(100h);
  FailureRateEstimator f;
  f.record_failure(t0);
  f.record_failure(t0 + 2h);
  f.record_failure(t0 + 3h);
  CHECK(f.mtbf(t0 + 4h, 4h) == 2h);  // 4h over the 2 failures after the first
}

TEST_CASE("checkpoint cost is the median of recent samples") {
  CheckpointCostEstimator c;
  CHECK(c.estimate(45s) == 45s);
  c.record(100s);  // a cold first save
  CHECK(c.estimate(45s) == 100s);
  c.record(10s);
  CHECK(c.estimate(45s) == 55s);
  c.record(12s);
  CHECK(c.estimate(45s) == 12s);
  for (int i = 0; i < 8; ++i) c.record(20s);
  CHECK(c.estimate(45s) == 20s);  // old samples dropped
}

#include "policies/goodput.h"

TEST_CASE("goodput: productive over allocated GPU-seconds; lost work becomes recompute") {
  using shardguard::policies::Badput;
  shardguard::policies::GoodputAccumulator g;
  g.training(100, 8);                 // 800 GPU-s of steps
  g.badput(Badput::kCheckpoint, 5, 8);  // 40
  g.badput(Badput::kRestart, 20, 8);    // 160
  g.lose(10, 8);                        // 80 of the 800 were redone later
  const auto& t = g.totals();
  CHECK(t.allocated_gpu_seconds == Approx(1000));
  CHECK(t.productive_gpu_seconds == Approx(720));
  CHECK(t.badput(Badput::kRecompute) == Approx(80));
  CHECK(t.ratio() == Approx(0.72));
  g.lose(1000, 8);  // never more than was productive
  CHECK(g.totals().productive_gpu_seconds == Approx(0));
  CHECK(g.totals().allocated_gpu_seconds == Approx(1000));
}
