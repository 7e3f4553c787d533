// Slurm, the decisions: what `scontrol show job` says about why a job is being stopped, and
// whether shardguard requeues the job itself once its run ended with the emergency
// checkpoint (exit 75). Slurm's `--requeue` does not requeue a job that exits 75 (it ends
// FAILED 75:0 unless the admin set RequeueExit=75), and a wrapper that always requeues turns
// a user's scancel into a requeue: this table tells the cases apart.
//
// What Slurm 22.05 shows when the job's processes get their signal (measured here, see
// tests/slurm/README.md and docs/slurm.md):
//   --signal lead (USR1...)    RUNNING, PreemptTime=None
//   scancel                    COMPLETING, Reason=None, Restarts unchanged, PreemptTime=None
//   time limit                 COMPLETING, Reason=TimeLimit
//   scontrol requeue           COMPLETING (then PENDING), Restarts + 1
//   preemption (both modes)    RUNNING, PreemptTime set, until GraceTime ends; Slurm requeues
//                              (REQUEUE mode) only a job still running then: one that exits 75
//                              within the grace ends FAILED 75:0, so shardguard requeues it
// A job already requeued refuses another `scontrol requeue` ("Job is pending execution"), so
// a race with Slurm's own requeue cannot requeue twice.
//
// Pure: the records are arguments. Thread-safety: plain functions and values.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/scheduler_env.h"
#include "core/result.h"

namespace shardguard::agent {

// The fields of one `scontrol show job -o` record that the decisions read.
struct SlurmJobState {
  uint32_t job_id = 0;
  std::string state;         // JobState: RUNNING, COMPLETING, PENDING, CANCELLED, TIMEOUT, ...
  std::string reason;        // Reason: None, TimeLimit, BeginTime, ...
  bool requeueable = false;  // Requeue=1
  uint32_t restarts = 0;     // Restarts
  bool preempting = false;   // PreemptTime set: selected for preemption, in its GraceTime
  std::string partition;
  std::string exc_nodes;  // ExcNodeList; empty for "(null)"
  std::string batch_host;
};

// Parses one record ("JobId=7 JobName=x ... JobState=RUNNING ..."; a token without '=' continues
// the previous value). kInvalid names the missing JobId or JobState.
Result<SlurmJobState> parse_slurm_job(std::string_view record);

// A `--signal` as sbatch reads it, "[{R|B}:]SIG[@SECONDS]" (also SBATCH_SIGNAL): e.g.
// "B:USR1@90". `batch_only`: B: (the batch shell alone). kInvalid names the text.
struct SlurmSignalSpec {
  int signal = 0;
  bool batch_only = false;
  std::chrono::seconds lead{60};  // Slurm's default when "@" is absent
};
Result<SlurmSignalSpec> parse_slurm_signal_spec(std::string_view text);

// What a process inside a Slurm job learns from its environment.
struct SlurmJobEnv {
  uint32_t job_id = 0;             // SLURM_JOB_ID
  uint32_t restart_count = 0;      // SLURM_RESTART_COUNT (unset: never requeued)
  std::string node;                // SLURMD_NODENAME
  std::optional<uint32_t> procid;  // SLURM_PROCID
  // SLURM_NODEID: this node's index in the allocation (a multi-node job's node rank).
  std::optional<uint32_t> node_id;
  std::string job_nodes;           // SLURM_JOB_NODELIST ("n[1-2]"): node index k is its k-th host
  std::string partition;           // SLURM_JOB_PARTITION
  // SBATCH_SIGNAL, when the submission gave --signal that way (sbatch exports it to the job).
  // Slurm 22.05 shows a --signal flag nowhere else: not in `scontrol show job`, not in
  // `squeue --json`.
  std::optional<SlurmSignalSpec> signal;
};
// nullopt outside a Slurm job (no SLURM_JOB_ID) or with SHARDGUARD_SLURM=off; kInvalid names
// a malformed variable.
Result<std::optional<SlurmJobEnv>> read_slurm_job_env(const EnvMap& env);

// Whether `scontrol show config` output says RequeueExit lists `code` ("RequeueExit = 75,76";
// "(null)" lists nothing).
bool slurm_requeue_exit_lists(std::string_view show_config, int code);

// ExcNodeList with `node` added (once): "" + n1 -> "n1", "n2" + n1 -> "n2,n1".
std::string add_excluded_node(std::string_view exc_nodes, std::string_view node);

// One notice of the run and the job's state read when it came.
struct SlurmStopSeen {
  // The supervisor's reason: "sigterm", "sigusr1", "sigint", "drain: ...",
  // "aws-spot-interruption", "node-unhealthy", ...
  std::string notice;
  std::optional<SlurmJobState> job;  // nullopt: the read failed
};

struct SlurmRunOutcome {
  int exit_code = 0;               // of `shardguard run`
  uint32_t restarts_at_start = 0;  // SLURM_RESTART_COUNT (0 when unset)
  std::vector<SlurmStopSeen> stops;
  std::optional<SlurmJobState> at_end;  // read after the run ended
  std::string unhealthy_node;           // the Slurm name of the node that failed a health check
  bool slurm_requeues_exit_75 = false;  // RequeueExit lists 75: Slurm requeues it itself
  // This process decides for the job: a single-node run, or the node that runs a multi-node
  // job's coordinator. The other nodes never requeue: one requeue per job, not per node.
  bool is_requeuer = true;
};

enum class SlurmCase {
  kNotStopped,       // the run did not end with the emergency checkpoint (exit != 75)
  kUnknown,          // the job's state could not be read
  kRequeuedBySlurm,  // `scontrol requeue` by a person, or Slurm's own: never twice
  kCancelled,        // a user's scancel: the job ends CANCELLED
  kUnhealthy,        // a node of the job failed a health check: requeue without it
  kTimeLimit,        // the time limit (SIGTERM, then KillWait)
  kPreempted,        // preemption by a higher-priority job (REQUEUE or CANCEL mode)
  kSignalLead,       // --signal before the time limit (or scancel --signal)
  kMachineNotice,    // a cloud's notice: the machine goes away
  kDrain,            // an operator's `shardguard drain`: the job stops here
  kInterrupted,      // SIGINT: a person interrupted it
  kUnexplainedTerm,  // SIGTERM while the job runs, not from Slurm's scheduling
  kNoNotice,         // the ranks exited 75 by themselves
  kOtherNode,        // a node of a multi-node job that does not run the coordinator
};
std::string_view slurm_case_name(SlurmCase c);  // "cancelled", "time-limit", ...

struct SlurmRequeueDecision {
  SlurmCase what = SlurmCase::kNotStopped;
  bool requeue = false;      // run `scontrol requeue`
  std::string exclude_node;  // then add it to ExcNodeList (also after Slurm's own requeue)
  std::string why;           // one sentence for the log and the events file
};

// The table (issue 12; docs/slurm.md). Requeues only after exit 75, only a requeueable
// job that Slurm has not requeued and will not requeue itself, never after a user's scancel,
// and only from the process that decides for the job (is_requeuer).
SlurmRequeueDecision decide_slurm_requeue(const SlurmRunOutcome& outcome);

}  // namespace shardguard::agent
