// HealthMonitor with scripted checks and a FakeClock: thresholds, start grace, fatal
// findings, recovery, jitter, timeouts, counters.
#include "agent/health/health_monitor.h"

#include <catch2/catch.hpp>
#include <deque>

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::agent;

namespace {

// Answers each run with `next` (or the front of `queue` when it holds any); with `hang`,
// keeps the callback and never answers.
class ScriptedCheck final : public HealthCheck {
 public:
  explicit ScriptedCheck(std::string name) : name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  void run(Done done) override {
    ++runs;
    if (hang) {
      pending = std::move(done);
      return;
    }
    HealthFinding f = next;
    if (!queue.empty()) {
      f = queue.front();
      queue.pop_front();
    }
    done(f);
  }
  void answer(HealthFinding::Severity s, std::string evidence = "scripted") {
    next = HealthFinding{};
    next.severity = s;
    next.evidence = std::move(evidence);
  }

  std::string name_;
  HealthFinding next;
  std::deque<HealthFinding> queue;
  bool hang = false;
  HealthCheck::Done pending;
  int runs = 0;
};

CheckPolicy policy(Duration grace = 0s, int threshold = 3) {
  CheckPolicy p;
  p.interval = 10s;
  p.jitter = 0.1;
  p.start_grace = grace;
  p.failure_threshold = threshold;
  p.timeout = 5s;
  return p;
}

struct MonitorFixture {
  FakeClock clock;
  HealthMonitor monitor{clock, clock, [] { return 0.5; }};  // 0.5: exact intervals
  std::vector<std::vector<HealthFinding>> unhealthy;
  int healthy_calls = 0;

  ScriptedCheck* add(const std::string& name, CheckPolicy p) {
    auto check = std::make_unique<ScriptedCheck>(name);
    ScriptedCheck* raw = check.get();
    monitor.add(std::move(check), p);
    return raw;
  }
  void start() {
    monitor.start([this](std::vector<HealthFinding> e) { unhealthy.push_back(std::move(e)); },
                  [this] { ++healthy_calls; });
    clock.advance(0s);  // the first runs (initial delay 0)
  }
  CheckStatus status(size_t i = 0) const { return monitor.status().at(i); }
};

}  // namespace

TEST_CASE("health monitor: a warning makes the node unhealthy only after N consecutive failures") {
  MonitorFixture f;
  ScriptedCheck* c = f.add("disk", policy(0s, 3));
  c->answer(HealthFinding::kWarning, "low disk");
  f.start();
  CHECK(f.unhealthy.empty());
  f.clock.advance(10s);
  CHECK(f.unhealthy.empty());
  CHECK(f.status().consecutive_failures == 2);
  f.clock.advance(10s);
  REQUIRE(f.unhealthy.size() == 1);
  REQUIRE(f.unhealthy[0].size() == 1);
  CHECK(f.unhealthy[0][0].check == "disk");
  CHECK(f.unhealthy[0][0].evidence == "low disk");
  CHECK_FALSE(f.monitor.healthy());
  f.clock.advance(60s);
  CHECK(f.unhealthy.size() == 1);  // once per transition
  const CheckStatus s = f.status();
  CHECK(s.counters.attempts == 9);
  CHECK(s.counters.failures == 9);
  CHECK(s.counters.successes == 0);
  CHECK_FALSE(s.fatal);
}

TEST_CASE("health monitor: a check whose warnings only advise never makes the node unhealthy") {
  MonitorFixture f;
  CheckPolicy p = policy(0s, 3);
  p.warnings_make_unhealthy = false;
  ScriptedCheck* c = f.add("disk", p);
  c->answer(HealthFinding::kWarning, "less than one checkpoint");
  f.start();
  f.clock.advance(600s);  // 61 warnings in a row
  CHECK(c->runs == 61);
  CHECK(f.unhealthy.empty());
  CHECK(f.monitor.healthy());
  CHECK(f.status().healthy);
  CHECK(f.status().counters.failures == 61);
  SECTION("a fatal finding still counts at once") {
    c->answer(HealthFinding::kFatal, "below the hard minimum");
    f.clock.advance(10s);
    REQUIRE(f.unhealthy.size() == 1);
    CHECK(f.unhealthy[0][0].evidence == "below the hard minimum");
  }
  SECTION("so does a check that stops answering") {
    c->hang = true;
    f.clock.advance(10s + 3 * 15s);  // three runs time out after 5 s each
    REQUIRE(f.unhealthy.size() == 1);
    CHECK_THAT(f.unhealthy[0][0].evidence, Catch::Contains("no answer within"));
  }
}

TEST_CASE("health monitor: the disk's warnings only advise, by default") {
  CHECK_FALSE(HealthSettings{}.disk_policy.warnings_make_unhealthy);
  for (const CheckPolicy& p :
       {HealthSettings{}.gpu_policy, HealthSettings{}.xid_policy, HealthSettings{}.memory_policy})
    CHECK(p.warnings_make_unhealthy);
}

TEST_CASE("health monitor: a success in between restarts the count") {
  MonitorFixture f;
  ScriptedCheck* c = f.add("memory", policy(0s, 3));
  for (auto s : {HealthFinding::kWarning, HealthFinding::kWarning, HealthFinding::kOk,
                 HealthFinding::kWarning, HealthFinding::kWarning}) {
    HealthFinding x;
    x.severity = s;
    c->queue.push_back(x);
  }
  f.start();
  f.clock.advance(40s);
  CHECK(c->runs == 5);
  CHECK(f.unhealthy.empty());
  CHECK(f.status().counters.successes == 1);
  CHECK(f.status().consecutive_failures == 2);
}

TEST_CASE("health monitor: failures during the start grace do not count") {
  MonitorFixture f;
  ScriptedCheck* c = f.add("memory", policy(60s, 3));
  c->answer(HealthFinding::kWarning);
  f.start();
  f.clock.advance(50s);  // runs at 0, 10, ..., 50: all in the grace
  CHECK(c->runs == 6);
  CHECK(f.status().counters.failures == 6);
  CHECK(f.status().consecutive_failures == 0);
  CHECK(f.status().in_grace);
  f.clock.advance(20s);  // 60 and 70 count
  CHECK(f.unhealthy.empty());
  CHECK(f.status().consecutive_failures == 2);
  f.clock.advance(10s);
  CHECK(f.unhealthy.size() == 1);
}

TEST_CASE("health monitor: the first success ends the start grace") {
  MonitorFixture f;
  ScriptedCheck* c = f.add("disk", policy(600s, 3));
  c->answer(HealthFinding::kOk);
  f.start();
  CHECK_FALSE(f.status().in_grace);
  c->answer(HealthFinding::kWarning);
  f.clock.advance(30s);
  CHECK(f.unhealthy.size() == 1);
}

TEST_CASE("health monitor: a fatal finding is immediate, even in the grace, and does not heal") {
  MonitorFixture f;
  ScriptedCheck* c = f.add("xid", policy(60s, 3));
  f.add("disk", policy(60s, 3));
  c->answer(HealthFinding::kFatal, "GPU PCI:0000:10:1c: Xid 79 (GPU has fallen off the bus)");
  f.start();
  REQUIRE(f.unhealthy.size() == 1);
  REQUIRE(f.unhealthy[0].size() == 1);
  CHECK(f.unhealthy[0][0].check == "xid");
  CHECK(f.unhealthy[0][0].severity == HealthFinding::kFatal);
  CHECK(f.status(0).fatal);
  c->answer(HealthFinding::kOk);  // the XID was reported once; later looks find nothing new
  f.clock.advance(100s);
  CHECK_FALSE(f.monitor.healthy());
  CHECK(f.healthy_calls == 0);
  REQUIRE(f.monitor.evidence().size() == 1);
  CHECK(f.monitor.evidence()[0].evidence.find("Xid 79") != std::string::npos);
}

TEST_CASE("health monitor: warning-level unhealthiness recovers, and may come back") {
  MonitorFixture f;
  CheckPolicy p = policy(0s, 2);
  p.success_threshold = 2;
  ScriptedCheck* c = f.add("disk", p);
  c->answer(HealthFinding::kWarning);
  f.start();
  f.clock.advance(10s);
  REQUIRE(f.unhealthy.size() == 1);
  c->answer(HealthFinding::kOk);
  f.clock.advance(10s);
  CHECK(f.healthy_calls == 0);  // one success is not enough with success_threshold 2
  f.clock.advance(10s);
  CHECK(f.healthy_calls == 1);
  CHECK(f.monitor.healthy());
  CHECK(f.monitor.evidence().empty());
  c->answer(HealthFinding::kWarning);
  f.clock.advance(20s);
  CHECK(f.unhealthy.size() == 2);
}

TEST_CASE("health monitor: 'not available' is neither a success nor a failure") {
  MonitorFixture f;
  ScriptedCheck* c = f.add("gpu", policy(0s, 1));
  c->next = not_available_finding("gpu", "NVML: dlopen failed");
  f.start();
  f.clock.advance(30s);
  CHECK(f.unhealthy.empty());
  const CheckStatus s = f.status();
  CHECK_FALSE(s.available);
  CHECK(s.counters.unavailable == 4);
  CHECK(s.counters.successes == 0);
  CHECK(s.counters.failures == 0);
  CHECK(s.last.evidence == "not available: NVML: dlopen failed");
}

TEST_CASE("health monitor: intervals are jittered within interval * [1 - j, 1 + j]") {
  FakeClock clock;
  std::deque<double> draws{0.0, 1.0, 0.25};
  HealthMonitor monitor(clock, clock, [&] {
    const double r = draws.front();
    draws.pop_front();
    return r;
  });
  auto check = std::make_unique<ScriptedCheck>("disk");
  ScriptedCheck* c = check.get();
  monitor.add(std::move(check), policy());
  monitor.start(nullptr);
  clock.advance(0s);
  REQUIRE(c->runs == 1);
  clock.advance(9s - 1ns);
  CHECK(c->runs == 1);
  clock.advance(1ns);  // r = 0: 9 s
  CHECK(c->runs == 2);
  clock.advance(11s - 1ns);
  CHECK(c->runs == 2);
  clock.advance(1ns);  // r = 1: 11 s
  CHECK(c->runs == 3);
  clock.advance(9500ms);  // r = 0.25: 9.5 s
  CHECK(c->runs == 4);
}

TEST_CASE(
    "health monitor: a check that never answers fails at the timeout; a late answer is dropped") {
  MonitorFixture f;
  ScriptedCheck* c = f.add("command:dcgm", policy(0s, 2));
  c->hang = true;
  f.start();
  f.clock.advance(5s);
  CHECK(f.status().counters.failures == 1);
  CHECK(f.status().last.evidence.find("no answer within") != std::string::npos);
  HealthFinding ok;
  c->pending(ok);  // late: ignored
  CHECK(f.status().counters.successes == 0);
  f.clock.advance(15s);  // next run at 15 s, times out at 20 s
  CHECK(c->runs == 2);
  CHECK(f.unhealthy.size() == 1);
}

TEST_CASE("health monitor: evidence names every unhealthy check; stop() leaves no timer") {
  MonitorFixture f;
  ScriptedCheck* a = f.add("disk", policy(0s, 1));
  ScriptedCheck* b = f.add("memory", policy(0s, 2));
  a->answer(HealthFinding::kWarning, "disk low");
  b->answer(HealthFinding::kWarning, "memory low");
  f.start();
  REQUIRE(f.unhealthy.size() == 1);
  CHECK(f.unhealthy[0].size() == 1);
  f.clock.advance(10s);
  REQUIRE(f.monitor.evidence().size() == 2);
  CHECK(f.monitor.evidence()[1].evidence == "memory low");
  CHECK(f.monitor.find("memory") == b);
  CHECK(f.monitor.find("nope") == nullptr);
  f.monitor.stop();
  CHECK(f.clock.pending_timers() == 0);
  f.clock.advance(100s);
  CHECK(a->runs == 2);
}
