// The simulator against reality: a scripted sequence of 20 disruptions (kill -9 of a rank 1.5
// to 5.5 steps after a commit; SIGTERM to `shardguard run` 200 ms to 500 ms after the ranks are
// ready, then a new `shardguard run` as a scheduler would start) is applied to a real run of
// the C++ example trainer, then replayed in the simulator, which must agree on the lost steps
// and the downtime (disruption -> the next attempt's ranks ready), summed over the sequence:
// within max(10%, 2 steps) and max(10%, 0.5 s).
//
// Steps take about 120 ms (--sleep-ms 120), longer than the clients' 100 ms heartbeat limit,
// so every step is reported and the supervisor's count of lost steps is exact, and kills land
// in the middle of a step: the comparison is not at the mercy of a heartbeat's phase.
//
// The simulator's cost figures (step time, save time, launch-to-ready, teardown, the ranks'
// exit after an emergency commit, the resume scan, the gap before the next `shardguard run`)
// are medians measured from the same run's events.jsonl, as the bench's calibration would be;
// what the simulator must get right is what the machine does with them: when each attempt
// ends, what it resumes from, the emergency step and every wait between. The offsets replayed
// are those the harness really applied (a sleep can overshoot).
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "sim/fleet_timeline.h"
#include "sim/job_simulator.h"
#include "tests/run/run_fixture.h"

using namespace shardguard;
using namespace shardguard::testing;
using namespace std::chrono_literals;
using sim::ScriptedDisruption;
using supervisor::EventRecord;

namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t num(const EventRecord& e, const std::string& key) {
  const std::string v = field(e, key);
  return v.empty() ? -1 : std::stoll(v);
}
double real(const EventRecord& e, const std::string& key) {
  const std::string v = field(e, key);
  return v.empty() ? -1 : std::stod(v);
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / double(v.size());
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

constexpr double kStep = 0.121;  // --sleep-ms 120 and the step itself
constexpr int kEvery = 10;       // checkpoint every 10 steps

// The fixed sequence: every third disruption a notice, the others kills of rank 0 or 1.
std::vector<ScriptedDisruption> script() {
  std::vector<ScriptedDisruption> s;
  for (int i = 0; i < 20; ++i) {
    ScriptedDisruption d;
    if (i % 3 == 2) {
      d.anchor = ScriptedDisruption::Anchor::kReady;
      d.action = ScriptedDisruption::Action::kNotice;
      d.after = 0.2 + 0.1 * (i % 4);
      d.lead = 30;  // [stop] grace
    } else {
      d.anchor = ScriptedDisruption::Anchor::kCommit;
      d.action = ScriptedDisruption::Action::kKill;
      d.after = kStep * (1.5 + double(i % 5));  // mid-step: 1.5 to 5.5 steps after the commit
      d.rank = uint32_t(i % 2);
    }
    s.push_back(d);
  }
  return s;
}

struct Applied {
  ScriptedDisruption d;  // `after` as really applied
  int64_t at_ms = 0;
  int64_t attempt = 0;
};

// The harness: waits for each disruption's anchor in an attempt newer than the last one hit.
std::vector<Applied> apply_script(const RunDirs& d, const std::vector<std::string>& argv) {
  auto run = std::make_unique<Background>(argv, d.log());
  std::vector<Applied> applied;
  int64_t last = -1;
  for (const ScriptedDisruption& s : script()) {
    int64_t attempt = -1, anchor = -1;
    const bool found = eventually(
        [&] {
          int64_t ready = -1;
          for (const auto& e : events_of(d)) {
            if (e.type == "ranks_ready" && num(e, "attempt") > last) {
              attempt = num(e, "attempt");
              ready = e.time_unix_ms;
            }
            if (s.anchor == ScriptedDisruption::Anchor::kCommit && ready >= 0 &&
                e.type == "checkpoint_committed" && num(e, "attempt") == attempt && anchor < 0)
              anchor = e.time_unix_ms;
          }
          if (s.anchor == ScriptedDisruption::Anchor::kReady) anchor = ready;
          return anchor >= 0;
        },
        60s);
    INFO(slurp(d.log()));
    REQUIRE(found);
    const int64_t target = anchor + int64_t(s.after * 1000);
    while (now_ms() < target) std::this_thread::sleep_for(1ms);
    Applied a{s, 0, attempt};
    if (s.action == ScriptedDisruption::Action::kKill) {
      pid_t pid = 0;
      for (const auto& e : events_named(d, "hello"))
        if (num(e, "attempt") == attempt && num(e, "rank") == s.rank) pid = pid_t(num(e, "pid"));
      REQUIRE(pid > 0);
      REQUIRE(::kill(pid, SIGKILL) == 0);
      a.at_ms = now_ms();
    } else {
      run->signal(SIGTERM);
      a.at_ms = now_ms();
      REQUIRE(run->wait(60s) == std::optional<int>(75));
      run = std::make_unique<Background>(argv, d.log());  // the scheduler starts it again
    }
    a.d.after = double(a.at_ms - anchor) / 1000;
    applied.push_back(a);
    last = attempt;
  }
  // The last disruption's downtime ends when the next attempt is ready.
  REQUIRE(eventually(
      [&] {
        for (const auto& e : events_named(d, "ranks_ready"))
          if (num(e, "attempt") > last) return true;
        return false;
      },
      60s));
  run->signal(SIGTERM);
  run->wait(60s);
  return applied;
}

// How long the supervisor takes to read a commit back: its record against the manifest's
// own mtime (the rename that committed it), for every checkpoint kept.
double readback(const std::vector<EventRecord>& ev) {
  std::vector<double> delays;
  for (const auto& e : ev) {
    if (e.type != "checkpoint_committed") continue;
    struct stat st {};
    if (::stat(field(e, "manifest").c_str(), &st) != 0) continue;
    const double mtime_ms = double(st.st_mtim.tv_sec) * 1000 + double(st.st_mtim.tv_nsec) / 1e6;
    delays.push_back((double(e.time_unix_ms) - mtime_ms) / 1000);
  }
  return std::max(0.0, median(delays));
}

// The costs the simulator needs, as medians of the run's own events.
sim::FleetConfig calibrate(const std::vector<EventRecord>& ev, double duration, double seen_after) {
  std::vector<double> step, save, ready, teardown, scan, exit_after_commit, requeue;
  std::map<int64_t, const EventRecord*> end_of, launch_of;
  std::map<int64_t, double> backoff_of;
  const EventRecord* previous_commit = nullptr;
  const EventRecord* ready_of_attempt = nullptr;
  for (size_t i = 0; i < ev.size(); ++i) {
    const EventRecord& e = ev[i];
    const int64_t attempt = num(e, "attempt");
    // The step time: steps between two periodic commits of an attempt, or from its ranks
    // being ready (after their first step) to its first commit, less the save's own time.
    if (e.type == "checkpoint_committed" && num(e, "step") % kEvery == 0) {
      const EventRecord* from = previous_commit && num(*previous_commit, "attempt") == attempt
                                    ? previous_commit
                                    : nullptr;
      double from_step = from ? double(num(*from, "step")) : -1;
      if (!from && ready_of_attempt && num(*ready_of_attempt, "attempt") == attempt &&
          launch_of.contains(attempt)) {
        from = ready_of_attempt;
        from_step = double(std::max<int64_t>(num(*launch_of[attempt], "resume_step"), 0) + 1);
      }
      if (from && double(num(e, "step")) > from_step) {
        const double dt =
            double(e.time_unix_ms - from->time_unix_ms) / 1000 - (real(e, "seconds") - seen_after);
        step.push_back(dt / (double(num(e, "step")) - from_step));
      }
      save.push_back(real(e, "seconds"));
    }
    if (e.type == "checkpoint_committed") previous_commit = &e;
    if (e.type == "ranks_ready") {
      ready.push_back(real(e, "seconds_since_launch"));
      ready_of_attempt = &e;
    }
    if (e.type == "attempt_end") end_of[attempt] = &e;
    if (e.type == "launch") launch_of[attempt] = &e;
    if (e.type == "backoff") backoff_of[attempt] = real(e, "seconds");
    if (e.type == "teardown") {
      for (size_t j = i + 1; j < ev.size(); ++j) {
        if (ev[j].type != "attempt_end") continue;
        const double dt = double(ev[j].time_unix_ms - e.time_unix_ms) / 1000;
        if (field(ev[j], "class") == "crash") teardown.push_back(dt);
        break;
      }
      if (field(e, "why") == "every rank exited" && previous_commit)
        exit_after_commit.push_back(double(e.time_unix_ms - previous_commit->time_unix_ms) / 1000);
    }
    if (e.type == "finish") {
      for (size_t j = i + 1; j < ev.size(); ++j)
        if (ev[j].type == "start") {
          requeue.push_back(double(ev[j].time_unix_ms - e.time_unix_ms) / 1000);
          break;
        }
    }
  }
  for (const auto& [attempt, end] : end_of) {
    auto next = launch_of.find(attempt + 1);
    if (next == launch_of.end() || !backoff_of.contains(attempt)) continue;
    scan.push_back(double(next->second->time_unix_ms - end->time_unix_ms) / 1000 -
                   backoff_of[attempt]);
  }
  sim::FleetConfig c;
  c.source = "reality";
  c.duration = duration;
  c.job.nodes = 1;
  c.job.gpus_per_node = 2;
  c.job.step_seconds = median(step);
  c.job.independent_ranks = true;  // the example trainer's ranks never wait for each other
  c.calibration.async_save = false;
  c.calibration.save_seconds = std::max(0.0, median(save) - seen_after);  // the loop's stall
  c.calibration.load_seconds = 0;                                         // in launch-to-ready
  c.calibration.commit_seconds = 0;
  c.costs.launch = median(ready);
  c.costs.rendezvous = 0;
  c.costs.teardown = median(teardown);
  // The ranks leave on the supervisor's next 200 ms tick after the commit: spread evenly, so
  // the mean stands for them (a median would not sum right).
  c.costs.rank_exit = mean(exit_after_commit);
  c.costs.resume_scan = std::max(0.0, median(scan));
  c.costs.commit_readback = seen_after;
  c.costs.requeue = median(requeue);
  c.costs.node_loss_detection = 0;
  // The job's own [restart] settings (below).
  c.restart.backoff_initial = 0.01;
  c.restart.backoff_max = 0.05;
  c.restart.no_progress_limit = 0;
  c.restart.unlimited_budgets = true;
  c.failures.kind = sim::FailureModel::Kind::kNone;
  c.preemption.cloud = sim::Cloud::kNone;
  c.preemption.hazard = 0;
  return c;
}

}  // namespace

TEST_CASE("A scripted sequence of notices and kills: the simulator agrees with a real run",
          "[sim][reality][integration]") {
  RunDirs d;
  std::ofstream(d.config()) << "[job]\ncheckpoint_dir = \"" << d.ckpt() << "\"\nrun_dir = \""
                            << d.run() << "\"\n"
                            << "[checkpoint]\nevery_steps = " << kEvery << "\nkeep_last = 0\n"
                            << "[restart]\nbackoff_initial = \"10ms\"\nbackoff_max = \"50ms\"\n"
                            << "no_progress_limit = 0\n[restart.crash]\nmax_restarts = 1000\n"
                            << "window = \"1h\"\n[stop]\ngrace = \"30s\"\nterm_grace = \"2s\"\n";
  const auto argv = run_argv(d, 2,
                             {"--rows", "64", "--log-every", "0", "--sleep-ms", "120",
                              "--checkpoint-every", std::to_string(kEvery), "--steps", "10000000"});
  const int64_t started = now_ms();
  const std::vector<Applied> applied = apply_script(d, argv);
  const auto events = events_of(d);
  INFO(slurp(d.log()));

  // What really happened to each disruption.
  std::vector<uint64_t> real_lost;
  std::vector<double> real_down;
  for (const Applied& a : applied) {
    int64_t lost = -1, ready = -1;
    for (const auto& e : events) {
      if (e.type == "attempt_end" && num(e, "attempt") == a.attempt) lost = num(e, "lost_steps");
      if (e.type == "ranks_ready" && num(e, "attempt") > a.attempt && ready < 0)
        ready = e.time_unix_ms;
    }
    REQUIRE(lost >= 0);
    REQUIRE(ready > 0);
    real_lost.push_back(uint64_t(lost));
    real_down.push_back(double(ready - a.at_ms) / 1000);
  }

  // The same sequence in the simulator.
  const sim::FleetConfig c =
      calibrate(events, 3 * double(now_ms() - started) / 1000 + 600, readback(events));
  sim::Policy p;
  p.name = "reality";
  p.interval = policies::IntervalMode::kSteps;
  p.every_steps = kEvery;
  p.emergency = true;
  sim::SimOptions o;
  for (const Applied& a : applied) o.script.push_back(a.d);
  const sim::RunResult r = sim::simulate_run(c, p, sim::quiet_fleet(1), 1, o);
  REQUIRE(r.disruptions.size() == applied.size());

  double lost_real = 0, lost_sim = 0, down_real = 0, down_sim = 0;
  std::string table = "  #  action  after  lost real/sim  downtime real/sim\n";
  for (size_t i = 0; i < applied.size(); ++i) {
    lost_real += double(real_lost[i]);
    lost_sim += double(r.disruptions[i].lost_steps);
    down_real += real_down[i];
    down_sim += r.disruptions[i].downtime;
    char line[160];
    std::snprintf(line, sizeof line, " %2zu  %-6s  %.3f  %4llu / %-4llu     %.3f / %.3f\n", i,
                  applied[i].d.action == ScriptedDisruption::Action::kKill ? "kill" : "notice",
                  applied[i].d.after, static_cast<unsigned long long>(real_lost[i]),
                  static_cast<unsigned long long>(r.disruptions[i].lost_steps), real_down[i],
                  r.disruptions[i].downtime);
    table += line;
  }
  char calib[360];
  std::snprintf(calib, sizeof calib,
                "calibration: step %.4f s, save %.4f s, commit read back %.3f s, launch-to-ready "
                "%.3f s, teardown %.3f s, exit after commit %.3f s, resume scan %.3f s, requeue "
                "%.3f s",
                c.job.step_seconds, *c.calibration.save_seconds, c.costs.commit_readback,
                c.costs.launch, c.costs.teardown, c.costs.rank_exit, c.costs.resume_scan,
                c.costs.requeue);
  WARN(calib << "\n"
             << table << "lost steps: real " << lost_real << ", simulated " << lost_sim
             << "; downtime: real " << down_real << " s, simulated " << down_sim << " s");
  CHECK(std::abs(lost_sim - lost_real) <= std::max(0.10 * lost_real, 2.0));
  CHECK(std::abs(down_sim - down_real) <= std::max(0.10 * down_real, 0.5));
}
