#include "sim/runner.h"

#include <chrono>
#include <cmath>

#include "sim/fleet_timeline.h"
#include "sim/job_simulator.h"

namespace shardguard::sim {
namespace {

PolicySummary summarize(const Policy& p, const std::vector<RunResult>& runs) {
  PolicySummary s;
  s.policy = p;
  std::vector<double> g;
  std::array<std::vector<double>, policies::kBadputCauses> b;
  const double n = double(std::max<size_t>(runs.size(), 1));
  for (const RunResult& r : runs) {
    g.push_back(r.goodput.ratio());
    for (size_t i = 0; i < policies::kBadputCauses; ++i)
      b[i].push_back(r.goodput.allocated_gpu_seconds > 0
                         ? r.goodput.badput_gpu_seconds[i] / r.goodput.allocated_gpu_seconds
                         : 0);
    s.failures_hit += double(r.failures_hit) / n;
    s.preemptions += double(r.preemptions) / n;
    s.notices += double(r.notices) / n;
    s.emergency_commits += double(r.emergency_commits) / n;
    s.checkpoints += double(r.checkpoints) / n;
    s.attempts += double(r.attempts) / n;
    s.machines += double(r.machines) / n;
    s.give_ups += double(r.give_ups) / n;
    s.lost_steps += r.lost_steps / n;
    s.machine_events += double(r.machine_events) / n;
    s.sim_events += double(r.sim_events) / n;
  }
  s.goodput = estimate(g);
  for (size_t i = 0; i < policies::kBadputCauses; ++i) s.badput[i] = estimate(b[i]);
  return s;
}

}  // namespace

const Policy& sweep_base(const FleetConfig& c) {
  for (const Policy& p : c.policies)
    if (p.name == c.sweep.base) return p;
  for (const Policy& p : c.policies)
    if (p.emergency) return p;
  return c.policies.front();
}

double young_daly_point(const FleetConfig& c, const Policy& p) {
  const supervisor::MachineConfig m = machine_config_for(c, p);
  const double cost =
      (c.calibration.async_save ? stall_seconds(c.calibration, c.job.nodes, c.job.gpus_per_node)
                                : 0.0) +
      save_seconds(c.calibration, c.job.nodes);
  const Duration d = policies::young_daly_interval(
      std::chrono::duration_cast<Duration>(std::chrono::duration<double>(cost)), m.mtbf);
  return std::chrono::duration<double>(d).count();
}

std::vector<double> default_sweep_intervals(const FleetConfig& c, double yd) {
  const double lo = std::max(60.0, 2 * save_seconds(c.calibration, c.job.nodes));
  const double hi = std::max(4 * yd, 4 * lo);
  std::vector<double> out;
  constexpr int kPoints = 9;
  for (int i = 0; i < kPoints; ++i)
    out.push_back(lo * std::pow(hi / lo, double(i) / (kPoints - 1)));
  return out;
}

SimulationReport run_simulation(const FleetConfig& c, const RunnerOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  SimulationReport rep;
  rep.runs = o.runs > 0 ? o.runs : c.runs;
  rep.seed = o.seed.value_or(c.seed);
  rep.duration = c.duration;
  const Calibration& cal = c.calibration;
  rep.stall_seconds = stall_seconds(cal, c.job.nodes, c.job.gpus_per_node);
  rep.save_seconds = (cal.async_save ? rep.stall_seconds : 0.0) + save_seconds(cal, c.job.nodes);
  rep.load_seconds = load_seconds(cal, c.job.nodes);
  rep.job_mtbf = job_mtbf_seconds(c.failures, uint64_t(c.job.nodes) * c.job.gpus_per_node);

  // One fleet per seed, met by every policy and every sweep point.
  std::vector<FleetTimeline> fleets;
  for (uint32_t r = 0; r < rep.runs; ++r) fleets.push_back(generate_fleet(c, rep.seed + r));
  auto run_all = [&](const Policy& p) {
    std::vector<RunResult> results;
    for (uint32_t r = 0; r < rep.runs; ++r)
      results.push_back(simulate_run(c, p, fleets[r], rep.seed + r));
    return results;
  };
  for (const Policy& p : c.policies) {
    rep.policies.push_back(summarize(p, run_all(p)));
    if (o.progress) o.progress("policy " + p.name + ": done");
  }
  if (o.sweep) {
    SweepSummary s;
    const Policy& base = sweep_base(c);
    s.base = base.name;
    s.young_daly = young_daly_point(c, base);
    const std::vector<double> grid =
        c.sweep.intervals.empty() ? default_sweep_intervals(c, s.young_daly) : c.sweep.intervals;
    std::vector<double> xs, ys;
    for (double every : grid) {
      Policy p = base;
      p.interval = policies::IntervalMode::kTime;
      p.every = every;
      const PolicySummary sum = summarize(p, run_all(p));
      s.points.push_back({every, sum.goodput});
      xs.push_back(every);
      ys.push_back(sum.goodput.mean);
      if (o.progress) o.progress("sweep: interval " + std::to_string(int64_t(every)) + " s done");
    }
    s.optimum = fitted_maximum(xs, ys, kSweepFitWindow);
    rep.sweep = std::move(s);
  }
  rep.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return rep;
}

}  // namespace shardguard::sim
