// sg_bench_sim: the fleet simulator's speed on the headline scenario (issue 16): 30 simulated
// days x 100 seeds of one policy on one core, target under 10 s. Prints the wall time, the
// events it took (the machine's and the simulator's own) and the goodput it found, so a
// regression in either shows. `--config FILE` runs another scenario, `--policy NAME` another
// policy of it (default: auto+notice, shardguard's policy), `--runs N` another seed count.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "sim/fleet_config.h"
#include "sim/job_simulator.h"

using namespace shardguard;
using namespace shardguard::sim;

int main(int argc, char** argv) {
  std::string config_path, policy_name = "auto+notice";
  uint32_t runs = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--config")
      config_path = argv[i + 1];
    else if (flag == "--policy")
      policy_name = argv[i + 1];
    else if (flag == "--runs")
      runs = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    else
      return std::fprintf(stderr, "usage: sg_bench_sim [--config F] [--policy P] [--runs N]\n"), 2;
  }
  FleetConfig cfg;
  cfg.policies = default_policies(cfg.job);
  if (!config_path.empty()) {
    auto loaded = load_fleet_config(config_path);
    if (!loaded.ok()) return std::fprintf(stderr, "%s\n", loaded.error().message().c_str()), 1;
    cfg = *loaded;
  }
  const Policy* policy = nullptr;
  for (const auto& p : cfg.policies)
    if (p.name == policy_name) policy = &p;
  if (policy == nullptr) return std::fprintf(stderr, "no policy '%s'\n", policy_name.c_str()), 1;

  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  double goodput = 0, fleet_seconds = 0;
  uint64_t machine_events = 0, sim_events = 0, attempts = 0;
  for (uint32_t r = 0; r < runs; ++r) {
    const auto f0 = std::chrono::steady_clock::now();
    const FleetTimeline fleet = generate_fleet(cfg, cfg.seed + r);
    fleet_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - f0).count();
    const RunResult res = simulate_run(cfg, *policy, fleet, cfg.seed + r);
    goodput += res.goodput.ratio();
    machine_events += res.machine_events;
    sim_events += res.sim_events;
    attempts += res.attempts;
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double months = cfg.duration / (30 * 86400.0) * runs;
  std::printf("scenario: %u nodes x %u GPUs, %.0f simulated days x %u seeds, policy %s\n",
              cfg.job.nodes, cfg.job.gpus_per_node, cfg.duration / 86400, runs,
              policy->name.c_str());
  // CPU time too: on a shared machine the wall time says more about the neighbours.
  const double cpu = double(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  std::printf(
      "wall time: %.2f s, CPU time: %.2f s (target < 10 s on one core); fleet generation %.2f s\n",
      wall, cpu, fleet_seconds);
  std::printf("per simulated month: %.0f machine events, %.0f simulator events, %.0f attempts\n",
              double(machine_events) / months, double(sim_events) / months,
              double(attempts) / months);
  std::printf("mean goodput: %.4f\n", goodput / runs);
  return 0;
}
