// Runs what a fleet config asks: every policy over the same seeds (each seed's fleet is
// generated once and met by every policy and every sweep point: common random numbers), and
// goodput against the checkpoint interval for the sweep's policy, with the Young/Daly point
// and the optimum of a fitted curve. Thread-safety: run_simulation is reentrant.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policies/goodput.h"
#include "sim/fleet_config.h"
#include "sim/stats.h"

namespace shardguard::sim {

struct PolicySummary {
  Policy policy;
  Estimate goodput;  // productive / allocated GPU-seconds, over seeds
  std::array<Estimate, policies::kBadputCauses> badput;  // shares of allocated GPU-seconds
  // Means per run.
  double failures_hit = 0, preemptions = 0, notices = 0, emergency_commits = 0, checkpoints = 0,
         attempts = 0, machines = 0, give_ups = 0, lost_steps = 0, machine_events = 0,
         sim_events = 0;
};

struct SweepPoint {
  double interval = 0;  // seconds between periodic checkpoint requests
  Estimate goodput;
};

struct SweepSummary {
  std::string base;  // the policy swept (interval = "time", every = each point)
  std::vector<SweepPoint> points;
  double young_daly = 0;                // what interval = "auto" starts from: sqrt(2 x cost x MTBF)
  std::optional<CurveOptimum> optimum;  // of a quadratic through the best 5 points
};

// Points the sweep's optimum and its plot are fitted to (around the best one).
inline constexpr size_t kSweepFitWindow = 5;

struct SimulationReport {
  uint32_t runs = 0;
  uint64_t seed = 0;
  double duration = 0;
  double save_seconds = 0;   // begin -> commit at full size (what `auto` measures)
  double stall_seconds = 0;  // the loop's stop per periodic save
  double load_seconds = 0;
  double job_mtbf = 0;  // failures only (preemptions aside)
  std::vector<PolicySummary> policies;
  std::optional<SweepSummary> sweep;
  double wall_seconds = 0;
};

struct RunnerOptions {
  uint32_t runs = 0;  // 0: the config's
  std::optional<uint64_t> seed;
  bool sweep = true;
  std::function<void(std::string_view)> progress;  // one line per finished batch
};

SimulationReport run_simulation(const FleetConfig& config, const RunnerOptions& options);

// The policy `sweep` varies: the named one, else the first with emergency checkpoints.
const Policy& sweep_base(const FleetConfig& config);
// The interval `auto` would choose before it measured anything: Young/Daly from the save
// cost at full size and the policy's MTBF prior.
double young_daly_point(const FleetConfig& config, const Policy& policy);
// The sweep's default grid: 9 log-spaced intervals from max(60 s, twice the save) to 4 x YD.
std::vector<double> default_sweep_intervals(const FleetConfig& config, double young_daly);

}  // namespace shardguard::sim
