// `shardguard run` inside a Slurm job (SLURM_JOB_ID set; SHARDGUARD_SLURM=off turns it off):
// zero configuration.
//   - The job's signal is a notice by default: SIGUSR1 (what `--signal=B:USR1@90` and the
//     shipped examples/slurm script send), or the one SBATCH_SIGNAL names.
//   - Each notice (signal, a rank's SIGTERM, a cloud's, a failed health check) makes it read
//     the job's state (`scontrol show job`, on the worker: the loop keeps serving).
//   - The events file gets "slurm_job" at start (job id, SLURM_RESTART_COUNT, node), then
//     "slurm_state" per read, "slurm_decision" and "slurm_requeue" at the end.
//   - Once the run ended, agent/slurm_policy.h decides whether shardguard requeues the job
//     itself (`scontrol requeue`, then ExcNodeList after a failed health check): only after
//     exit 75, never after a user's scancel, never when Slurm requeued it or will.
// A multi-node job (one `shardguard run` per node) has one process that decides: the node
// that runs the coordinator (node rank 0, or the node that took over from it). It sees every
// node's notices through the coordinator, reads the job's state and requeues the job, once.
// The other nodes (SlurmRole::kFollows) only add the job's signal to their notice signals and
// record "slurm_job" and their "slurm_decision"; they never run scontrol, so a notice costs
// slurmctld one read per job, not one per node.
// Outside Slurm every call does nothing.
//
// Thread-safety: attach() and finish() on the main thread, observe() on the loop thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "agent/scheduler_env.h"
#include "agent/slurm_command.h"
#include "io/deps.h"
#include "supervisor/job_config.h"

namespace shardguard::cli {

// Whether this process decides the job's requeue (a single-node run, the coordinator's node)
// or leaves it to the node that does (the other nodes of a multi-node job).
enum class SlurmRole { kDecides, kFollows };

class SlurmIntegration {
 public:
  // Reads the Slurm environment; inside a job, adds the job's signal to the notice signals of
  // `config` and records "slurm_job" in the run's events file (creating the run directory).
  // `deps` must outlive the object.
  static std::unique_ptr<SlurmIntegration> attach(
      const io::Deps& deps, supervisor::JobConfig& config, SlurmRole role = SlurmRole::kDecides,
      const agent::EnvMap& env = agent::environment_snapshot(),
      agent::CommandRunner runner = agent::run_command_blocking);
  ~SlurmIntegration();

  bool active() const;
  // A node of a multi-node job that took over from the coordinator decides from now on.
  void take_decisions();
  // A lifecycle event of the decision core ("preempt_notice", "node_unhealthy" with the
  // unhealthy node's id in "node"): reads the job's state on the worker. Other events, and
  // every event on a node that follows, are ignored.
  void observe(std::string_view event, const std::map<std::string, std::string>& fields);
  // After the run's loop ended: waits (bounded) for the reads, decides by the table, requeues
  // when it says so, and returns `exit_code` unchanged. Blocks for the scontrol calls (none
  // on a node that follows).
  int finish(int exit_code);

 private:
  struct Impl;
  explicit SlurmIntegration(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::cli
