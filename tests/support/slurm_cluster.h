// SlurmCluster: a real Slurm (Debian's slurm-wlm 22.05) on this machine for integration
// tests. It writes a private slurm.conf in a temporary directory, starts its own munged
// (own key and socket), slurmctld and one slurmd per node (`slurmd -N n1`, all on
// 127.0.0.1 with their own ports), waits until every node is idle, and stops everything it
// started by pid. Several clusters (parallel ctest, other engineers) run side by side: each
// has its own ports, munge socket, cluster name and directory.
//
// The conf is made for fast tests: cred_expire, SlurmdTimeout and MessageTimeout are seconds;
// a low ("low", default) and a high ("high") priority partition with partition_prio
// preemption in REQUEUE or CANCEL mode; no cgroups (proctrack/linuxproc), no accounting daemon
// (read states with job()). Commands reach the cluster through SLURM_CONF (env(), run()).
// Timings this Slurm keeps whatever the conf says (slurmctld checks on fixed periods) are
// in tests/slurm/README.md.
//
// Processes are found by pid, never by name pattern: the daemons by the files below dir()
// they hold open (slurmstepd rewrites its title and environment, but keeps its node's log),
// the jobs' processes by SHARDGUARD_SLURM_FIXTURE=<dir> (inherited through sbatch's default
// --export=ALL) or SLURM_CLUSTER_NAME=<cluster_name()> in their environment. start() first
// removes what crashed earlier runs left (clusters whose owner process is gone).
//
// Thread-safety: one thread at a time. Start and destroy it on the test's thread: slurmctld
// and slurmd get SIGTERM when the thread that started them ends (so a crashed test does not
// leave them; what is left is swept by the next start()).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "tests/support/proc_tools.h"

namespace shardguard::testing {

inline constexpr const char* kSlurmLowPartition = "low";    // default, PriorityTier=1
inline constexpr const char* kSlurmHighPartition = "high";  // PriorityTier=10, never preempted

struct SlurmOptions {
  int nodes = 2;          // named n1..nN
  int cpus_per_node = 2;  // SlurmdParameters=config_overrides: need not match cores
  int real_memory_mb = 1000;
  std::string preempt_mode = "REQUEUE";  // REQUEUE | CANCEL | OFF (no preemption)
  int grace_time_s = 5;                  // the low partition's GraceTime
  int kill_wait_s = 5;                   // KillWait: SIGTERM -> SIGKILL
  int slurmd_timeout_s = 5;              // a silent slurmd is marked DOWN after this...
  int message_timeout_s = 5;             // ...plus about 2 x this (10 s by default)
  int cred_expire_s = 5;                 // AuthInfo cred_expire: a requeued job's hold
  // How slurmstepd finds a job's processes (no cgroups here). linuxproc follows parent pids:
  // like the cgroups of real clusters, it reaches children in process groups of their own
  // (shardguard's ranks) but loses orphans. pgid signals only the job's process groups.
  std::string proctrack = "proctrack/linuxproc";
  // GPUs as a GRES Slurm counts without real devices: GresTypes=gpu, Gres=gpu:N on every node,
  // and a gres.conf naming N empty files per node (dir()/gpus/nK/nvidia<i>) as the devices,
  // so that Slurm gives each step the indices it allocated (CUDA_VISIBLE_DEVICES). 0: none.
  int gpus_per_node = 0;
  std::vector<std::string> extra_conf;     // lines appended verbatim (e.g. "RequeueExit=75")
  std::chrono::seconds start_timeout{45};  // until every node is idle
};

// What render_slurm_conf() needs besides the options: where and on which ports.
struct SlurmConfSpec {
  SlurmOptions options;
  std::string dir;  // state, spool, logs and pid files go below it
  std::string cluster_name;
  std::string munge_socket;
  int ctld_port = 0;
  std::vector<int> node_ports;  // one per node, n1 first
};

// The slurm.conf text for `spec` (pure; unit tested).
std::string render_slurm_conf(const SlurmConfSpec& spec);
// The gres.conf text (empty without GPUs): one line per node, its device files below
// spec.dir/gpus/<node>/.
std::string render_gres_conf(const SlurmConfSpec& spec);

// One record of `scontrol show -o` (job or node): "Key=Value Key=Value ...". A token without
// '=' continues the previous value (values with spaces).
std::map<std::string, std::string> parse_scontrol_record(const std::string& line);

// A job as `scontrol show job -o` reports it.
struct SlurmJob {
  std::map<std::string, std::string> fields;

  std::string get(const std::string& key) const;
  std::string state() const { return get("JobState"); }  // RUNNING, COMPLETED, ...
  std::string reason() const { return get("Reason"); }
  std::string node_list() const { return get("NodeList"); }
  std::string batch_host() const { return get("BatchHost"); }
  int restarts() const;  // Restarts=N
  // ExitCode=E:S as {E, S} (S: the signal that ended the batch script, 0 if none).
  std::pair<int, int> exit_code() const;
};

class SlurmCluster {
 public:
  // Why this machine cannot run the fixture (not root, a program missing), or nullopt.
  static std::optional<std::string> unavailable_reason();

  // Writes the conf and starts munged, slurmctld and every slurmd; returns once every node is
  // idle. Retries with new ports when one was taken meanwhile.
  static Result<std::unique_ptr<SlurmCluster>> start(SlurmOptions options = {});

  // Kills what crashed fixtures left: the processes of sg-slurm-* directories in $TMPDIR (or
  // named in a process's environment) whose owner process is gone, and removes those
  // directories. start() calls it.
  static void sweep_stale();

  ~SlurmCluster();
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  // SIGKILLs slurmctld, every slurmd and slurmstepd, every process of the cluster's jobs,
  // and munged (nothing is worth a graceful stop; a slurmd with steps waits for them on
  // SIGTERM); removes the directory (unless SHARDGUARD_KEEP_TEST_DIRS is set). Idempotent.
  void stop();

  const std::string& dir() const { return dir_; }
  const std::string& conf_path() const { return conf_path_; }
  const std::string& cluster_name() const { return cluster_name_; }
  const SlurmOptions& options() const { return options_; }
  std::vector<std::string> node_names() const;
  // "SLURM_CONF=..." and the fixture marker ("K=V" each): the environment for any Slurm
  // command (run() also drops inherited SLURM_* variables of a surrounding allocation).
  std::vector<std::string> env() const;
  // The same as a shell prefix ("SLURM_CONF='...' SHARDGUARD_SLURM_FIXTURE='...' ").
  std::string shell_env() const;

  // Runs a Slurm command (sbatch, srun, scontrol, ...) against this cluster.
  Result<ProcResult> run(const std::vector<std::string>& argv,
                         std::chrono::milliseconds timeout = std::chrono::seconds(30)) const;

  // Writes `script` to a file and submits it with `sbatch --parsable`; output goes to
  // job_output_path(id) and the job runs in dir()/jobs unless `sbatch_args` say otherwise
  // (they come after the fixture's, so they win). Returns the job id.
  Result<uint32_t> submit(const std::string& script,
                          const std::vector<std::string>& sbatch_args = {});
  std::string job_output_path(uint32_t id) const;

  // `scontrol show job -o ID`.
  Result<SlurmJob> job(uint32_t id) const;
  // Polls job(id) every 100 ms until its JobState is one of `states`; kTimeout error (naming
  // the last state) when `timeout` passes first.
  Result<SlurmJob> wait_job_state(uint32_t id, const std::vector<std::string>& states,
                                  std::chrono::milliseconds timeout) const;

  // `scontrol show node -o NAME` fields; state() is State without flags ("IDLE", "DOWN", ...).
  Result<std::map<std::string, std::string>> node(const std::string& name) const;
  Result<std::string> node_state(const std::string& name) const;
  // Polls until the node's base state is one of `states` (e.g. {"IDLE"}, {"DOWN"}).
  Result<std::string> wait_node_state(const std::string& name,
                                      const std::vector<std::string>& states,
                                      std::chrono::milliseconds timeout) const;

  // `scontrol show hostnames LIST`: "n[1-2]" -> {"n1", "n2"}.
  Result<std::vector<std::string>> hostnames(const std::string& nodelist) const;

  // Node failure: SIGKILL the node's slurmd, its slurmstepd processes and every process of
  // a job running on it (SLURMD_NODENAME=name). The node then stops answering slurmctld.
  Status kill_node(const std::string& name);
  // Starts the node's slurmd again (after kill_node); ReturnToService=2 lets it back in.
  Status restart_node(const std::string& name);
  // `scontrol update NodeName=name State=RESUME` (for a node DOWN or DRAINed by hand).
  Status resume_node(const std::string& name);

  // scancel of every job, then waits (bounded) until none is pending or running.
  Status cancel_all_jobs(std::chrono::milliseconds timeout = std::chrono::seconds(20));

  // Pids of the processes of job `id` on this machine (SLURM_JOB_ID=id in the environment).
  std::vector<pid_t> job_pids(uint32_t id) const;

  // The last `bytes` of slurmctld's log (for failure messages).
  std::string ctld_log_tail(size_t bytes = 4000) const;

 private:
  SlurmCluster() = default;
  Status start_munge();
  Status write_conf();
  Status start_ctld();
  Status start_slurmd(const std::string& name);
  Status wait_all_idle(std::chrono::milliseconds timeout);
  std::vector<std::string> child_env() const;

  SlurmOptions options_;
  std::string dir_, conf_path_, cluster_name_, munge_socket_;
  int ctld_port_ = 0;
  std::vector<int> node_ports_;
  pid_t munged_pid_ = -1, ctld_pid_ = -1;
  std::map<std::string, pid_t> slurmd_pids_;
  uint32_t scripts_ = 0;
  bool stopped_ = false;
};

}  // namespace shardguard::testing
