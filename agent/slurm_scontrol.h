// Slurm, the adapter: the few `scontrol` calls shardguard makes from inside a job - read the
// job's state, read whether slurm.conf requeues exit 75 (RequeueExit), requeue the job, keep
// a node out of its next run (ExcNodeList), and expand a node list (`scontrol show hostnames`,
// the production agent::SlurmHostnames of agent/scheduler_env.h). Commands run through an
// injected CommandRunner (agent/slurm_command.h); each is bounded by `timeout`.
//
// Every call blocks: call it on a worker, never on the loop thread (or after the loop ended).
// Thread-safety: const methods, safe from any thread if the runner is.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "agent/scheduler_env.h"
#include "agent/slurm_command.h"
#include "agent/slurm_policy.h"
#include "core/result.h"

namespace shardguard::agent {

class Scontrol {
 public:
  explicit Scontrol(CommandRunner run, Duration timeout = std::chrono::seconds(10));

  // `scontrol show job -o ID`, parsed.
  Result<SlurmJobState> show_job(uint32_t job_id) const;
  // Whether RequeueExit in `scontrol show config` lists `code`.
  Result<bool> requeue_exit_lists(int code) const;
  // `scontrol requeue ID`. Slurm signals every process of the job (this one too).
  Status requeue(uint32_t job_id) const;
  // `scontrol update JobId=ID ExcNodeList=LIST` (accepted once the job is requeued).
  Status set_excluded_nodes(uint32_t job_id, const std::string& exc_nodes) const;
  // `scontrol show hostnames LIST`: "n[1-2]" -> {"n1", "n2"}.
  Result<std::vector<std::string>> hostnames(std::string_view list) const;
  // hostnames() as resolve_placement() takes it.
  SlurmHostnames hostnames_function() const;

 private:
  // Runs `scontrol ARGS...`; a non-zero exit is an error naming the command and what it said.
  Result<std::string> scontrol(const std::vector<std::string>& args) const;

  CommandRunner run_;
  Duration timeout_;
};

}  // namespace shardguard::agent
