// policies/divergence_guard and core/scalar_window: how heartbeat windows aggregate, and when
// the guard calls a loss or gradient norm an anomaly (and from which step).
#include "policies/divergence_guard.h"

#include <catch2/catch.hpp>
#include <limits>

using namespace shardguard;
using namespace shardguard::policies;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

StepScalars loss_window(uint64_t from, uint64_t to, double value) {
  ScalarWindow w;
  for (uint64_t s = from; s <= to; ++s) w.add(s, value);
  return StepScalars{w, std::nullopt};
}

}  // namespace

TEST_CASE("scalar window: last, min, max of the finite values; the first non-finite step kept",
          "[unit]") {
  ScalarWindow w;
  CHECK(w.empty());
  w.add(10, 3.0);
  w.add(11, kNaN);
  w.add(12, 1.0);
  w.add(13, kInf);
  w.add(14, 2.0);
  CHECK(w.first_step == 10);
  CHECK(w.last_step == 14);
  CHECK(w.count == 3);
  CHECK(w.last == 2.0);
  CHECK(w.min == 1.0);
  CHECK(w.max == 3.0);
  REQUIRE(w.nonfinite_step);
  CHECK(*w.nonfinite_step == 11);

  ScalarWindow later;
  later.add(15, 7.0);
  ScalarWindow merged = w;
  merged.merge(later);
  CHECK(merged.first_step == 10);
  CHECK(merged.last_step == 15);
  CHECK(merged.count == 4);
  CHECK(merged.last == 7.0);
  CHECK(merged.max == 7.0);
  CHECK(*merged.nonfinite_step == 11);

  ScalarWindow only_nan;
  only_nan.add(20, kNaN);
  ScalarWindow a;
  a.add(18, 1.0);
  a.merge(only_nan);
  CHECK(a.last == 1.0);
  CHECK(*a.nonfinite_step == 20);
  CHECK(a.last_step == 20);

  StepScalars s{std::nullopt, w};
  StepScalars t{later, std::nullopt};
  s.merge(t);
  CHECK(s.loss);
  CHECK(s.grad_norm->count == 3);
}

TEST_CASE("guard: a NaN loss is an anomaly from the first step of its window, on any rank",
          "[unit]") {
  DivergenceGuard g(GuardOptions{});
  CHECK_FALSE(g.observe(0, loss_window(1, 5, 2.0)));
  CHECK_FALSE(g.observe(1, loss_window(1, 5, 2.0)));
  ScalarWindow w;
  w.add(6, 2.0);
  w.add(7, 2.0);
  w.add(8, kNaN);
  auto a = g.observe(1, StepScalars{w, std::nullopt});
  REQUIRE(a);
  CHECK(a->rank == 1);
  CHECK(a->scalar == "loss");
  CHECK(a->rule == "nonfinite");
  CHECK(a->first_step == 6);
  CHECK(a->seen_step == 8);
  CHECK(a->suspect_from == 7);  // the state that produced step 8's NaN
  CHECK(a->describe(0) == "rank 1: loss NaN or Inf (steps 6-8)");
}

TEST_CASE("guard: a non-finite grad_norm counts only when listed; disabled guard sees nothing",
          "[unit]") {
  ScalarWindow w;
  w.add(3, kInf);
  const StepScalars s{std::nullopt, w};
  DivergenceGuard by_default(GuardOptions{});
  CHECK_FALSE(by_default.observe(0, s));
  GuardOptions both;
  both.nonfinite = {"loss", "grad_norm"};
  DivergenceGuard listed(both);
  auto a = listed.observe(0, s);
  REQUIRE(a);
  CHECK(a->scalar == "grad_norm");
  GuardOptions off;
  off.enabled = false;
  DivergenceGuard disabled(off);
  CHECK_FALSE(disabled.observe(0, StepScalars{w, std::nullopt}));
}

TEST_CASE("guard: a spike over k x the rolling median for m steps; shorter spikes pass",
          "[unit]") {
  GuardOptions o;
  o.spike_factor = 5;
  o.spike_steps = 6;
  o.min_samples = 4;
  o.median_window = 8;
  DivergenceGuard g(o);
  uint64_t step = 0;
  auto beat = [&](uint64_t steps, double value) {
    const uint64_t from = step + 1;
    step += steps;
    return g.observe(0, loss_window(from, step, value));
  };
  // Too few samples for a median: even a huge value passes.
  CHECK_FALSE(beat(2, 1.0));
  CHECK_FALSE(beat(2, 100.0));
  for (int i = 0; i < 6; ++i) CHECK_FALSE(beat(2, 1.0));
  // A spike of 4 steps (two heartbeats) is shorter than spike_steps: no anomaly, and its
  // values never entered the median.
  CHECK_FALSE(beat(2, 50.0));
  CHECK_FALSE(beat(2, 50.0));
  CHECK_FALSE(beat(2, 1.0));
  // Below the factor: fine.
  CHECK_FALSE(beat(2, 4.9));
  CHECK_FALSE(beat(2, 4.9));
  CHECK_FALSE(beat(2, 4.9));
  CHECK_FALSE(beat(2, 1.0));
  const uint64_t spike_start = step + 1;
  CHECK_FALSE(beat(2, 30.0));
  CHECK_FALSE(beat(2, 60.0));
  auto a = beat(2, 40.0);
  REQUIRE(a);
  CHECK(a->rule == "spike");
  CHECK(a->first_step == spike_start);
  CHECK(a->suspect_from == spike_start - 1);
  CHECK(a->seen_step == step);
  CHECK(a->value == 60.0);
  CHECK(a->median > 0.9);
  CHECK(a->median < 5.0);
  CHECK(a->describe(5).find("loss 60 > 5 x median ") != std::string::npos);
  Anomaly big{0, "grad_norm", "spike", 1, 2, 0, 3.5e12, 2.5e-7};
  CHECK(big.describe(1e6) == "rank 0: grad_norm 3500000000000 > 1000000 x median 0.00000025 (steps 1-2)");
}

TEST_CASE("guard: each rank and scalar has its own median; reset forgets them", "[unit]") {
  GuardOptions o;
  o.spike_factor = 3;
  o.spike_steps = 1;
  o.min_samples = 2;
  o.spike_scalars = {"loss", "grad_norm"};
  DivergenceGuard g(o);
  for (uint64_t s = 1; s <= 3; ++s) {
    CHECK_FALSE(g.observe(0, loss_window(s, s, 1.0)));
    CHECK_FALSE(g.observe(1, loss_window(s, s, 100.0)));  // a rank with larger losses
  }
  CHECK_FALSE(g.observe(1, loss_window(4, 4, 150.0)));
  CHECK(g.observe(0, loss_window(4, 4, 10.0)));
  g.reset();
  CHECK_FALSE(g.observe(0, loss_window(5, 5, 10.0)));  // no history: not enough samples
}
