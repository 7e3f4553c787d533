// What the fleet simulator is asked (`shardguard simulate --config fleet.toml`): one job on N
// nodes x G GPUs, its storage and restart costs, the failure and preemption processes of its
// fleet, the policies to compare and the checkpoint intervals to sweep. Every default is the
// headline scenario of issue 16 (128 x 8 GPUs, 980 GB of state, 5 GB/s per node and 100 GB/s
// in all, Llama 3 failure rates, 5% preemptions per node per day with 30 s of notice, 120 s to
// replace a node, no spares), so an empty file simulates it.
// Times are seconds (double) throughout the simulator. Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "policies/checkpoint_interval.h"
#include "sim/calibration.h"
#include "sim/failure_table.h"
#include "sim/preemption_model.h"

namespace shardguard::sim {

struct JobShape {
  uint32_t nodes = 128;
  uint32_t gpus_per_node = 8;
  // One training step on all `nodes`; the global batch is fixed, so n nodes take nodes/n
  // times as long and a step is worth the same GPU-seconds at any size.
  double step_seconds = 5.0;
  // Ranks that never wait for each other (no collectives, like the example trainer): when one
  // dies the others finish the step they are in, and report it, before the teardown stops
  // them. False for real training, where they block in the next collective.
  bool independent_ranks = false;
};

// Costs of the node side, in seconds, that the calibration does not measure.
struct CostModel {
  double launch = 20;              // Launch -> ranks started on every node (processes, CUDA init)
  double rendezvous = 10;          // ranks started -> collectives formed
  double teardown = 5;             // TearDown -> the node confirms its ranks are gone
  double rank_exit = 1;            // emergency commit -> ranks exited by themselves
  double resume_scan = 1;          // FindResume -> ResumeFound (catalog scan and read-back)
  double commit_readback = 0;      // a manifest renamed into place -> the supervisor read it back
  double node_loss_detection = 3;  // a dead node -> NodeLost (three missed heartbeats)
  // Ranks report their step at most this often (the clients' rate limit): the supervisor's
  // view of the step is on average half of it old.
  double heartbeat_interval = 0.1;
  double node_replacement = 120;    // a node gone -> its replacement joins
  double requeue = 60;              // `run` exited 75 -> the scheduler starts the job again
  double give_up_restart = 1800;    // `run` gave up (76) -> an operator restarts the job
  uint32_t spare_nodes = 0;         // hot spares: members beyond `nodes`, placed when one is lost
  std::string scheduler = "slurm";  // names the default of `requeue` (slurm, kubernetes, none)
};

// The supervisor's own settings that shape restarts (the product's defaults).
struct RestartSettings {
  double backoff_initial = 1, backoff_max = 300, backoff_multiplier = 2.0, backoff_jitter = 0.2;
  double healthy_after = 600;
  uint32_t no_progress_limit = 3;
  bool unlimited_budgets = false;  // every restart budget effectively infinite
  double hang_timeout = 300;       // 0: no hang detection (and no heartbeats needed)
  double rendezvous_timeout = 600;
  double request_latency = 0.3;
  double safety_margin = 2;
};

// One way to run the job: the checkpoint interval, whether notices trigger an emergency
// checkpoint, and whether the job shrinks onto survivors (min_nodes < nodes).
struct Policy {
  std::string name;
  policies::IntervalMode interval = policies::IntervalMode::kAuto;
  double every = 1800;               // kTime
  uint64_t every_steps = 0;          // kSteps (the clients' own schedule)
  std::optional<double> mtbf_prior;  // kAuto; default: the failure model's MTBF for this job
  bool emergency = true;
  uint32_t min_nodes = 0;  // 0: the job's size (no shrinking)
};

// Goodput against the checkpoint interval, for the plot: `base` policy with interval = time
// and each `every` in turn (same seeds for every point).
struct Sweep {
  std::string base;               // a policy name; default: the first with emergency checkpoints
  std::vector<double> intervals;  // empty: a log-spaced grid around the Young/Daly point
};

struct FleetConfig {
  std::string source = "(defaults)";  // the file it came from, for messages
  double duration = 30 * 86400.0;
  uint32_t runs = 20;
  uint64_t seed = 1;

  JobShape job;
  Calibration calibration;  // storage figures (sim/calibration.h)
  CostModel costs;
  RestartSettings restart;
  FailureModel failures;
  PreemptionModel preemption;
  std::vector<Policy> policies;  // default: periodic 30 min, auto, + emergency, + elastic
  Sweep sweep;
};

// The headline scenario's four policies: periodic-only every 30 min; Young/Daly auto;
// auto + notice-driven emergency checkpoints (shardguard's policy); that + elastic shrink.
std::vector<Policy> default_policies(const JobShape& job);

// Parses a fleet TOML file; relative paths inside it (calibration, traces) are resolved
// against its directory. Errors name the file, line and key; all of them at once.
Result<FleetConfig> load_fleet_config(const std::string& path);
// The same from text (tests); `source` names it in messages, `base_dir` resolves paths.
Result<FleetConfig> parse_fleet_config(std::string_view text, const std::string& source,
                                       const std::string& base_dir);

// Checks what the parser cannot see key by key (a sweep naming no policy, MIN above MAX...).
Status validate(const FleetConfig& config);

}  // namespace shardguard::sim
