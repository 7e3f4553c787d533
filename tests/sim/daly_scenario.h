// Daly's setting in the fleet simulator ("A higher order estimate of the optimum checkpoint
// interval for restart dumps", FGCS 2006): one job, exponential failures of mean M, a restart
// of R = 10 min, a synchronous checkpoint of delta = 5 min, nothing else costs time. The swept
// interval is the compute time tau between checkpoints: periodic requests every tau + delta.
//
// Mapping onto the product: the supervisor arms its periodic timer at the launch, so the first
// period after a restart includes the load. The restart is therefore R - delta of backoff
// (initial = max, no jitter) and delta of load: the first period then holds tau of compute, as
// in Daly's model. A failure during the backoff hits no running rank (ignored); one during the
// load restarts the restart. Either way the restart's cost does not depend on tau, so the
// optimum tau is where Daly's model has it; daly_goodput() is this process's exact goodput.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "sim/fleet_config.h"
#include "sim/fleet_timeline.h"
#include "sim/job_simulator.h"

namespace shardguard::testing {

inline constexpr double kDalyRestart = 600, kDalyCheckpoint = 300;

inline sim::FleetConfig daly_config(double mtbf, double duration) {
  sim::FleetConfig c;
  c.source = "daly";
  c.duration = duration;
  c.job.nodes = 1;
  c.job.gpus_per_node = 1;
  c.job.step_seconds = 0.1;  // fine steps: the request's margin of 2 steps is 0.2 s
  c.calibration.async_save = false;
  c.calibration.save_seconds = kDalyCheckpoint;
  c.calibration.load_seconds = kDalyCheckpoint;
  c.calibration.commit_seconds = 0;
  c.costs = sim::CostModel{};
  c.costs.launch = c.costs.rendezvous = c.costs.teardown = c.costs.rank_exit = 0;
  c.costs.resume_scan = c.costs.node_loss_detection = 0;
  c.restart.backoff_initial = c.restart.backoff_max = kDalyRestart - kDalyCheckpoint;
  c.restart.backoff_multiplier = 1;
  c.restart.backoff_jitter = 0;
  c.restart.unlimited_budgets = true;
  c.restart.no_progress_limit = 0;
  c.restart.hang_timeout = 0;
  c.restart.request_latency = 0;
  c.failures = sim::exponential_failures(mtbf, 1);
  c.preemption.cloud = sim::Cloud::kNone;
  c.preemption.hazard = 0;
  return c;
}

inline sim::Policy daly_policy(double tau) {
  sim::Policy p;
  p.name = "daly";
  p.interval = policies::IntervalMode::kTime;
  p.every = tau + kDalyCheckpoint;
  p.emergency = false;
  return p;
}

// The expected goodput of this process at compute interval tau: a segment of tau + delta is
// retried until it completes, each failure costing the time to it plus a restart; a restart is
// tries of (backoff b, then a load L that a failure interrupts) until a load completes:
//   E[restart] = (b + (1 - p) / lambda) / p, p = exp(-lambda L)
//   goodput = tau / ((exp(lambda (tau + delta)) - 1) (1 / lambda + E[restart]))
inline double daly_goodput(double mtbf, double tau) {
  const double l = 1 / mtbf, b = kDalyRestart - kDalyCheckpoint, p = std::exp(-l * kDalyCheckpoint);
  const double restart = (b + (1 - p) / l) / p;
  return tau / (std::expm1(l * (tau + kDalyCheckpoint)) * (1 / l + restart));
}

struct DalyPoint {
  double tau = 0;
  double goodput = 0;     // productive / allocated over every replication
  uint64_t failures = 0;  // failures that hit the running job
};

// Goodput at each tau over `replications` independent fleets of `duration` seconds each; every
// tau meets the same fleets (common random numbers).
inline std::vector<DalyPoint> daly_sweep(double mtbf, const std::vector<double>& taus,
                                         uint32_t replications, double duration, uint64_t seed) {
  const sim::FleetConfig c = daly_config(mtbf, duration);
  std::vector<sim::FleetTimeline> fleets;
  for (uint32_t r = 0; r < replications; ++r) fleets.push_back(sim::generate_fleet(c, seed + r));
  std::vector<DalyPoint> out;
  for (double tau : taus) {
    DalyPoint p{tau, 0, 0};
    double productive = 0, allocated = 0;
    for (uint32_t r = 0; r < replications; ++r) {
      const auto res = sim::simulate_run(c, daly_policy(tau), fleets[r], seed + r);
      productive += res.goodput.productive_gpu_seconds;
      allocated += res.goodput.allocated_gpu_seconds;
      p.failures += res.failures_hit;
    }
    p.goodput = productive / allocated;
    out.push_back(p);
  }
  return out;
}

// The grid: 9 log-spaced taus over [tau0 / 2, 2 tau0] around Young's first-order compute
// interval tau0 = sqrt(2 delta M) - delta (computed from the inputs, not from Daly's answer).
inline std::vector<double> daly_grid(double mtbf) {
  const double tau0 = std::sqrt(2 * kDalyCheckpoint * mtbf) - kDalyCheckpoint;
  std::vector<double> out;
  for (int i = 0; i < 9; ++i) out.push_back(tau0 * std::pow(4.0, i / 8.0) / 2);
  return out;
}

}  // namespace shardguard::testing
