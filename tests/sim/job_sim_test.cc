// The job simulator around the real AttemptMachine, on small hand-made fleets whose every
// moment can be worked out by hand: a quiet run, a crash, a notice with and without emergency
// checkpoints, a notice too short for the save, a hang, an elastic shrink and grow, replayed
// disruptions; then the headline scenario's bookkeeping (identities, the machine's own lost
// steps, determinism, common random numbers, events per simulated month).
#include <catch2/catch.hpp>
#include <cmath>

#include "sim/fleet_config.h"
#include "sim/fleet_timeline.h"
#include "sim/job_simulator.h"

using namespace shardguard;
using namespace shardguard::sim;
using policies::Badput;

namespace {

// One node of 2 GPUs, 1 s steps, 10 s synchronous saves, 4 s loads, round-number costs.
FleetConfig small(uint32_t nodes = 1) {
  FleetConfig c;
  c.source = "test";
  c.duration = 3600;
  c.job.nodes = nodes;
  c.job.gpus_per_node = 2;
  c.job.step_seconds = 1;
  c.calibration.async_save = false;
  c.calibration.save_seconds = 10;
  c.calibration.load_seconds = 4;
  c.costs.launch = 2;
  c.costs.rendezvous = 1;
  c.costs.teardown = 1;
  c.costs.rank_exit = 0.5;
  c.costs.resume_scan = 0.5;
  c.costs.node_loss_detection = 3;
  c.costs.node_replacement = 100;
  c.costs.requeue = 20;
  c.costs.heartbeat_interval = 0;  // the supervisor sees the exact step: numbers by hand
  c.restart.backoff_initial = 1;
  c.restart.backoff_jitter = 0;
  c.restart.hang_timeout = 120;
  c.failures.kind = FailureModel::Kind::kNone;
  c.preemption.hazard = 0;
  return c;
}

Policy every(double seconds, bool emergency = false, uint32_t min_nodes = 0) {
  Policy p;
  p.name = "test";
  p.interval = policies::IntervalMode::kTime;
  p.every = seconds;
  p.emergency = emergency;
  p.min_nodes = min_nodes;
  return p;
}

FleetTimeline fleet_of(uint32_t slots, std::vector<FleetEvent> extra,
                       std::vector<FailureCause> causes = {}) {
  FleetTimeline f = quiet_fleet(slots);
  f.causes = std::move(causes);
  for (auto& e : extra) f.events.push_back(e);
  std::stable_sort(f.events.begin(), f.events.end(),
                   [](const FleetEvent& a, const FleetEvent& b) { return a.time < b.time; });
  return f;
}

const TimedRecord* first(const RunResult& r, const std::string& type, double after = -1) {
  for (const auto& tr : r.records)
    if (tr.record.type == type && tr.time > after) return &tr;
  return nullptr;
}

std::string field(const TimedRecord& tr, const std::string& key) {
  for (const auto& f : tr.record.fields)
    if (f.key == key)
      return std::visit(
          [](const auto& v) -> std::string {
            using V = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<V, std::string>)
              return v;
            else if constexpr (std::is_same_v<V, bool>)
              return v ? "true" : "false";
            else
              return std::to_string(v);
          },
          f.value);
  return "";
}

void check_identity(const RunResult& r) {
  double sum = r.goodput.productive_gpu_seconds;
  for (double b : r.goodput.badput_gpu_seconds) sum += b;
  CHECK(sum == Approx(r.goodput.allocated_gpu_seconds).epsilon(1e-9));
}

SimOptions traced() {
  SimOptions o;
  o.keep_records = true;
  return o;
}

}  // namespace

TEST_CASE("A quiet run: goodput is what the saves and the start cost, to the second",
          "[sim][job][unit]") {
  const FleetConfig c = small();
  const RunResult r = simulate_run(c, every(300), quiet_fleet(1), 1, traced());
  // Launch at 0.5 (resume scan), ranks ready at 3.5; requests at 300.5 + k 300, each save
  // 10 s after a 2-step margin: 11 saves in the hour.
  CHECK(r.checkpoints == 11);
  CHECK(r.attempts == 1);
  CHECK(r.goodput.allocated_gpu_seconds == Approx(3600 * 2));
  CHECK(r.goodput.badput(Badput::kCheckpoint) == Approx(11 * 10 * 2));
  CHECK(r.goodput.badput(Badput::kRestart) == Approx(3.5 * 2));
  CHECK(r.goodput.ratio() == Approx((3600 - 3.5 - 110) / 3600).epsilon(1e-9));
  CHECK(r.final_step == Approx(3600 - 3.5 - 110));
  check_identity(r);
  const auto* ready = first(r, "ranks_ready");
  REQUIRE(ready);
  CHECK(ready->time == Approx(3.5));
  const auto* commit = first(r, "checkpoint_committed");
  REQUIRE(commit);
  CHECK(commit->time == Approx(312.5));
  CHECK(field(*commit, "step") == "299");  // 297 steps done at 300.5, + the margin of 2
}

TEST_CASE("A crash loses the steps since the last commit and costs the restart",
          "[sim][job][unit]") {
  const FleetConfig c = small();
  const std::vector<FailureCause> causes = {{"software bug", "x", 1, Manifest::kCrash, false}};
  const FleetTimeline f = fleet_of(1, {{1000, FleetEventKind::kFailure, 0, 0, 0, 0}}, causes);
  const RunResult r = simulate_run(c, every(300), f, 1, traced());
  CHECK(r.failures_hit == 1);
  // The last save (step 879) ended at 912.5: the 87.5 steps since are redone.
  CHECK(r.lost_steps == Approx(1000 - 912.5));
  const auto* end = first(r, "attempt_end");
  REQUIRE(end);
  CHECK(field(*end, "class") == "crash");
  CHECK(field(*end, "lost_steps") == "87");  // the machine's own count, from the heartbeat
  // Teardown 1 s, backoff 1 s, resume scan 0.5 s, launch 2, rendezvous 1, load 4.
  const auto* ready = first(r, "ranks_ready", 1000);
  REQUIRE(ready);
  CHECK(ready->time == Approx(1009.5));
  CHECK(r.goodput.badput(Badput::kRecompute) == Approx(87.5 * 2));
  CHECK(r.goodput.badput(Badput::kRestart) == Approx((3.5 + 9.5) * 2));
  check_identity(r);
}

TEST_CASE("Failures during a save and during a restart", "[sim][job][unit]") {
  const FleetConfig c = small();
  const std::vector<FailureCause> causes = {{"software bug", "x", 1, Manifest::kCrash, false}};
  SECTION("during a save: it never commits, the resume is from the one before") {
    // The save of step 879 runs from 902.5 to 912.5.
    const FleetTimeline f = fleet_of(1, {{905, FleetEventKind::kFailure, 0, 0, 0, 0}}, causes);
    const RunResult r = simulate_run(c, every(300), f, 1, traced());
    const auto* launch = first(r, "launch", 905);
    REQUIRE(launch);
    CHECK(field(*launch, "resume_step") == "589");
    CHECK(r.lost_steps == Approx(879 - 589));
  }
  SECTION("during the load of a restart: the restart starts over") {
    // A crash at 1000; the relaunch loads from 1005.5 to 1009.5; a second crash at 1007.
    const FleetTimeline f = fleet_of(1,
                                     {{1000, FleetEventKind::kFailure, 0, 0, 0, 0},
                                      {1007, FleetEventKind::kFailure, 0, 0, 0, 0}},
                                     causes);
    const RunResult r = simulate_run(c, every(300), f, 1, traced());
    CHECK(r.failures_hit == 2);
    CHECK(r.attempts == 3);
    const auto* ready = first(r, "ranks_ready", 1000);
    REQUIRE(ready);
    // Teardown 1 s, backoff 2 s (the second in a row), scan, launch, rendezvous, load.
    CHECK(ready->time == Approx(1007 + 1 + 2 + 0.5 + 2 + 1 + 4));
    CHECK(r.lost_steps == Approx(1000 - 912.5));  // nothing more: no step ran in between
  }
}

TEST_CASE("A notice: an emergency checkpoint saves the work, or the loss shows without one",
          "[sim][job][unit]") {
  FleetConfig c = small();
  const FleetTimeline f = fleet_of(1, {{1000, FleetEventKind::kNotice, 0, 0, -1, 1030},
                                       {1030, FleetEventKind::kGone, 0, 0, -1, 0},
                                       {1130, FleetEventKind::kUp, 0, 1, -1, 0}});
  SECTION("shardguard: emergency checkpoint, exit 75, requeued on the replacement") {
    const RunResult r = simulate_run(c, every(300, true), f, 1, traced());
    CHECK(r.notices == 1);
    CHECK(r.emergency_commits == 1);
    CHECK(r.lost_steps == Approx(0));
    CHECK(r.machines == 2);
    const auto* commit = first(r, "checkpoint_committed", 999);
    REQUIRE(commit);
    // At 1000 the ranks are 0.5 s into step 967; at_step = 966 + a margin of 2 = 968, reached
    // at 1001.5; then the 10 s save.
    CHECK(commit->time == Approx(1011.5));
    const auto* fin = first(r, "finish");
    REQUIRE(fin);
    CHECK(field(*fin, "exit_code") == "75");
    CHECK(fin->time == Approx(1012));  // the ranks leave (0.5 s): nothing is left to kill
    const auto* launch = first(r, "launch", 1000);
    REQUIRE(launch);
    CHECK(launch->time == Approx(1130.5));  // the replacement joined at 1130
    CHECK(field(*launch, "resume_step") == field(*commit, "step"));
    // Requeued at 1012 (restart); from 1030 the job has no node until 1130 (waiting; a job
    // of fixed size counts its size all along).
    CHECK(r.goodput.badput(Badput::kWaiting) == Approx((1130 - 1030) * 2));
    check_identity(r);
  }
  SECTION("periodic only: the node dies at its deadline, the steps since 912.5 are lost") {
    const RunResult r = simulate_run(c, every(300, false), f, 1, traced());
    CHECK(r.notices == 0);
    CHECK(r.machines == 1);
    CHECK(r.lost_steps == Approx(1030 - 912.5));
    const auto* end = first(r, "attempt_end");
    REQUIRE(end);
    CHECK(field(*end, "class") == "infrastructure");
    check_identity(r);
  }
  SECTION("a notice shorter than the save: the deadline passes, the emergency save is lost") {
    const FleetTimeline short_notice = fleet_of(1, {{1000, FleetEventKind::kNotice, 0, 0, -1, 1008},
                                                    {1008, FleetEventKind::kGone, 0, 0, -1, 0},
                                                    {1108, FleetEventKind::kUp, 0, 1, -1, 0}});
    const RunResult r = simulate_run(c, every(300, true), short_notice, 1, traced());
    CHECK(r.emergency_commits == 0);
    const auto* fin = first(r, "finish");
    REQUIRE(fin);
    CHECK_THAT(field(*fin, "summary"), Catch::Contains("emergency checkpoint FAILED"));
    CHECK(r.lost_steps == Approx(968 - 879));  // from the save begun at 1001.5 to step 879
  }
}

TEST_CASE("A hang is found by the hang timeout, with heartbeats only as often as it needs",
          "[sim][job][unit]") {
  const FleetConfig c = small();
  const std::vector<FailureCause> causes = {{"NCCL watchdog", "x", 1, Manifest::kHang, false}};
  const FleetTimeline f = fleet_of(1, {{1000, FleetEventKind::kFailure, 0, 0, 0, 0}}, causes);
  const RunResult r = simulate_run(c, every(300), f, 1, traced());
  const auto* hang = first(r, "hang");
  REQUIRE(hang);
  CHECK(hang->time == Approx(1120));  // the last heartbeat was at the hang itself
  const auto* end = first(r, "attempt_end");
  REQUIRE(end);
  CHECK(field(*end, "class") == "hang");
  // A heartbeat per hang timeout, plus those before each periodic request and the failure.
  CHECK(r.heartbeats <= uint64_t(3600 / 120) + r.checkpoints + 4);
  CHECK(r.heartbeats >= uint64_t(3600 / 120) - 3);
}

TEST_CASE("Elastic: the job shrinks onto the survivor and grows back at a checkpoint",
          "[sim][job][unit]") {
  FleetConfig c = small(2);
  const FleetTimeline f = fleet_of(2, {{1000, FleetEventKind::kNotice, 0, 0, -1, 1030},
                                       {1030, FleetEventKind::kGone, 0, 0, -1, 0},
                                       {1130, FleetEventKind::kUp, 0, 2, -1, 0}});
  const RunResult r = simulate_run(c, every(300, true, 1), f, 1, traced());
  REQUIRE(first(r, "shrink"));
  const auto* small_launch = first(r, "launch", 1000);
  REQUIRE(small_launch);
  CHECK(field(*small_launch, "nproc") == "2");  // one node of 2 GPUs
  const auto* grow = first(r, "launch", small_launch->time);
  REQUIRE(grow);
  CHECK(field(*grow, "nproc") == "4");
  CHECK(r.machines == 1);
  CHECK(r.lost_steps == Approx(0));
  // Held: 2 nodes until 1030, 1 until 1130, 2 after.
  CHECK(r.goodput.allocated_gpu_seconds == Approx((3600 - 100) * 4 + 100 * 2));
  check_identity(r);
}

TEST_CASE("Replayed disruptions are applied at their anchors and measured", "[sim][job][unit]") {
  FleetConfig c = small();
  c.duration = 4000;
  SimOptions o;
  o.script = {{ScriptedDisruption::Anchor::kCommit, 50, ScriptedDisruption::Action::kKill, 1, 0},
              {ScriptedDisruption::Anchor::kReady, 30, ScriptedDisruption::Action::kNotice, 0, 60}};
  Policy p = every(300);
  const RunResult r = simulate_run(c, p, quiet_fleet(1), 1, o);
  REQUIRE(r.disruptions.size() == 2);
  CHECK(r.disruptions[0].at == Approx(312.5 + 50));
  CHECK(r.disruptions[0].lost_steps == 50);  // 50 s of steps after the commit
  CHECK(r.disruptions[0].downtime == Approx(1 + 1 + 0.5 + 2 + 1 + 4));
  CHECK(r.disruptions[1].at == Approx(r.disruptions[0].at + r.disruptions[0].downtime + 30));
  CHECK(r.disruptions[1].lost_steps == 0);
  CHECK(r.disruptions[1].downtime > 20);  // the emergency save, exit 75 and the requeue
  CHECK(r.machines == 2);
}

TEST_CASE("The headline scenario: books balance, the machine agrees, seeds repeat",
          "[sim][job][unit]") {
  FleetConfig c;
  c.policies = default_policies(c.job);
  const FleetTimeline f = generate_fleet(c, 3);
  for (const Policy& p : c.policies) {
    INFO(p.name);
    const RunResult r = simulate_run(c, p, f, 3, traced());
    check_identity(r);
    CHECK(r.goodput.ratio() > 0.85);
    CHECK(r.goodput.ratio() < 1.0);
    // The simulator's lost work and the machine's own count (from heartbeats) agree: they
    // differ only by the fraction of a step each attempt ends in.
    double machine_lost = 0;
    for (const auto& tr : r.records)
      if (tr.record.type == "attempt_end") machine_lost += std::stod(field(tr, "lost_steps"));
    CHECK(machine_lost <= r.lost_steps + 1e-6);
    CHECK(machine_lost >= r.lost_steps - double(r.attempts));
    // Node-level heartbeats: one per hang timeout, and before each notice and periodic request.
    CHECK(r.heartbeats < uint64_t(c.duration / 300) + r.checkpoints + r.notices + r.attempts + 50);
    // The simulator's own events stay ~10^4 a month.
    CHECK(r.sim_events < 40000);
    if (p.emergency) CHECK(r.notices > 100);
    if (p.emergency) CHECK(r.emergency_commits >= r.notices * 9 / 10);
  }
  // Seeds repeat exactly; policies meet the same fleet.
  const RunResult a = simulate_run(c, c.policies[2], f, 3),
                  b = simulate_run(c, c.policies[2], f, 3);
  CHECK(a.goodput.productive_gpu_seconds == b.goodput.productive_gpu_seconds);
  CHECK(a.machine_events == b.machine_events);
  const RunResult other = simulate_run(c, c.policies[0], f, 3);
  CHECK(other.preemptions == a.preemptions);
}
