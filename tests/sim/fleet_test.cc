// The fleet's history (sim/fleet_timeline.h): rates and mixes as published, notices ahead of
// the loss by the cloud's lead, replacements after the replacement time, traces replayed as
// written, and the same history for a seed whatever the policy.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>

#include "sim/fleet_config.h"
#include "sim/fleet_timeline.h"
#include "sim/random_streams.h"

using namespace shardguard;
using namespace shardguard::sim;

namespace {

size_t count(const FleetTimeline& f, FleetEventKind k) {
  size_t n = 0;
  for (const auto& e : f.events) n += e.kind == k ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("Failures arrive at the Llama 3 rate scaled to the fleet, in the published mix",
          "[sim][fleet][unit]") {
  FleetConfig c;  // 128 x 8 GPUs: one failure per ~49.5 h
  c.preemption.hazard = 0;
  c.duration = 365 * 86400.0;
  std::map<std::string, double> by_cause;
  double failures = 0;
  const int seeds = 8;
  for (int s = 0; s < seeds; ++s) {
    const FleetTimeline f = generate_fleet(c, 100 + s);
    for (const auto& e : f.events)
      if (e.kind == FleetEventKind::kFailure) {
        ++failures;
        by_cause[f.causes[size_t(e.cause)].name] += 1;
      }
  }
  // Poisson: expected 8 years / 49.5 h ~ 1416 failures; 5 sigma is ~13%.
  const double expected = seeds * c.duration / job_mtbf_seconds(c.failures, 1024);
  CHECK(failures == Approx(expected).epsilon(0.13));
  CHECK(by_cause["faulty GPU"] / failures == Approx(148.0 / 419).epsilon(0.15));
  CHECK(by_cause["GPU HBM3 memory"] / failures == Approx(72.0 / 419).epsilon(0.25));
  CHECK(llama3_causes().size() == 18);
  double total = 0;
  for (const auto& cause : llama3_causes()) total += cause.weight;
  CHECK(total == 419);
}

TEST_CASE("Preemptions: Poisson per node, the cloud's notice, replaced after 120 s",
          "[sim][fleet][unit]") {
  FleetConfig c;
  c.failures.kind = FailureModel::Kind::kNone;
  c.duration = 60 * 86400.0;
  const FleetTimeline f = generate_fleet(c, 7);
  const double gone = double(count(f, FleetEventKind::kGone));
  // 128 nodes x 60 days x -ln(0.95) per day ~ 394; 5 sigma ~ 25%.
  CHECK(gone == Approx(128 * 60 * -std::log(0.95)).epsilon(0.25));
  std::map<uint32_t, double> notice_at, gone_at;
  for (const auto& e : f.events) {
    if (e.kind == FleetEventKind::kNotice) {
      notice_at[e.node] = e.time;
      CHECK(e.deadline - e.time == Approx(30).margin(1e-6));
    }
    if (e.kind == FleetEventKind::kGone) gone_at[e.node] = e.time;
    if (e.kind == FleetEventKind::kUp && e.time > 0) {
      const uint32_t previous = e.node - f.slots;  // the same slot's previous machine
      REQUIRE(gone_at.contains(previous));
      CHECK(e.time - gone_at[previous] == Approx(120));
    }
  }
  for (const auto& [node, t] : gone_at) {
    REQUIRE(notice_at.contains(node));
    CHECK(t - notice_at[node] == Approx(30).margin(1e-6));
  }
}

TEST_CASE("The bathtub hazard samples its own CDF and stops every VM at 24 h",
          "[sim][fleet][unit]") {
  Bathtub b;
  Stream rng(3);
  std::vector<double> lifetimes;
  for (int i = 0; i < 20000; ++i) lifetimes.push_back(b.inverse(rng.uniform()));
  for (double t : {1800.0, 3 * 3600.0, 12 * 3600.0, 23 * 3600.0}) {
    double below = 0;
    for (double l : lifetimes) below += l <= t ? 1 : 0;
    INFO("t = " << t);
    CHECK(below / lifetimes.size() == Approx(b.cdf(t)).margin(0.015));
  }
  CHECK(*std::max_element(lifetimes.begin(), lifetimes.end()) <= b.b);
  CHECK(b.cdf(0) == 0);
  CHECK(b.cdf(b.b) == 1);
  // The shape: many early, few mid-life, a rise before the limit.
  CHECK(b.cdf(2 * 3600.0) > 0.3);
  CHECK(b.cdf(20 * 3600.0) - b.cdf(10 * 3600.0) < 0.02);
  CHECK(b.cdf(24 * 3600.0 - 1) - b.cdf(20 * 3600.0) > 0.2);
}

TEST_CASE("A preemption trace is replayed at its ticks", "[sim][fleet][unit]") {
  FleetConfig c;
  c.job.nodes = 2;
  c.failures.kind = FailureModel::Kind::kNone;
  c.duration = 3600;
  SpotTrace t;
  t.gap_seconds = 600;
  t.data = {0, 0, 1, 0, 0, 0};  // preempted during [1200, 1800)
  c.preemption.traces = {t};
  c.preemption.trace_random_offset = false;
  const FleetTimeline f = generate_fleet(c, 1);
  REQUIRE(count(f, FleetEventKind::kGone) == 2);
  for (const auto& e : f.events)
    if (e.kind == FleetEventKind::kGone) {
      CHECK(e.time >= 1200);
      CHECK(e.time < 1800);
    }
}

TEST_CASE("An availability trace caps the machines held and refills them", "[sim][fleet][unit]") {
  FleetConfig c;
  c.job.nodes = 4;
  c.failures.kind = FailureModel::Kind::kNone;
  c.costs.node_replacement = 60;
  c.duration = 4000;
  SpotTrace t;
  t.gap_seconds = 1000;
  t.data = {4, 2, 4, 4};
  c.preemption.traces = {t};
  c.preemption.trace_kind = TraceKind::kAvailability;
  c.preemption.trace_random_offset = false;
  const FleetTimeline f = generate_fleet(c, 1);
  CHECK(count(f, FleetEventKind::kNotice) == 2);  // at 1000: two of four must go
  int held = 0;
  for (const auto& e : f.events) {
    if (e.kind == FleetEventKind::kUp) ++held;
    if (e.kind == FleetEventKind::kGone) {
      --held;
      CHECK(e.time == Approx(1000 + c.preemption.notice));
    }
    if (e.time > 1000 + c.preemption.notice && e.time < 2000) CHECK(held <= 2);
  }
  CHECK(held == 4);  // refilled once the trace allowed it (2000 + 60 s)
}

TEST_CASE("A seed's fleet is the same every time", "[sim][fleet][unit]") {
  FleetConfig c;
  const FleetTimeline a = generate_fleet(c, 11), b = generate_fleet(c, 11),
                      d = generate_fleet(c, 12);
  REQUIRE(a.events.size() == b.events.size());
  for (size_t i = 0; i < a.events.size(); ++i) {
    CHECK(a.events[i].time == b.events[i].time);
    CHECK(a.events[i].node == b.events[i].node);
  }
  CHECK(a.events.size() != d.events.size());
}
