// Where this node stands in a multi-node job, read from what the scheduler put in the
// environment: node rank, node count, the coordinator's endpoint (rendezvous), a job id
// hint, the shared secret file and the scheduler's restart count. `shardguard run` calls
// it once at start-up; flags override the environment field by field (DESIGN.md 6b).
//
// Each value comes from the first source that has it: a flag, then a SHARDGUARD_* variable
// (any scheduler), then the scheduler's own variables:
//   node rank    --node-rank, SHARDGUARD_NODE_RANK; Indexed Job: JOB_COMPLETION_INDEX;
//                JobSet: JOB_INDEX x P + JOB_COMPLETION_INDEX; Slurm: SLURM_NODEID
//   node count   --nnodes, SHARDGUARD_NNODES (N or MIN:MAX); JobSet with one pod per child
//                Job: REPLICATED_JOB_REPLICAS; Slurm: SLURM_STEP_NUM_NODES, SLURM_NNODES
//   coordinator  --rdzv-endpoint, SHARDGUARD_RDZV_ENDPOINT; else host and port apart:
//     host       SHARDGUARD_RDZV_HOST; Indexed Job: <job>-0.<service>; JobSet:
//                JOBSET_COORDINATOR, else <jobset>-<rjob>-0-0.<service>; Slurm: the first
//                host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST)
//     port       SHARDGUARD_RDZV_PORT; Kubernetes: 29400 (every pod has its own address);
//                Slurm: 20000 + SLURM_JOB_ID mod 10000 (jobs sharing a first node do not
//                collide; a requeued job keeps its id, so its port)
//   secret       --secret-file, SHARDGUARD_SECRET_FILE
//
// Kubernetes: <job> is HOSTNAME ("<job>-<index>", set by the Job controller) without its
// "-<index>"; <service> is SHARDGUARD_RDZV_SERVICE, the headless Service that is the pods'
// `subdomain` (for a JobSet it defaults to JOBSET_NAME, the JobSet's own Service). The
// JobSet variables are the pod annotations jobset.sigs.k8s.io/{jobset-name, replicatedjob-
// name, job-index, replicatedjob-replicas, coordinator, restart-attempt} exposed with the
// downward API as JOBSET_NAME, REPLICATED_JOB_NAME, JOB_INDEX, REPLICATED_JOB_REPLICAS,
// JOBSET_COORDINATOR, JOBSET_RESTART_ATTEMPT (examples/kubernetes/jobset.yaml). P, the pods
// per child Job, is the node count / REPLICATED_JOB_REPLICAS (1 for NonIndexed children).
// Slurm and Kubernetes variables both present: Slurm wins (slurmd running inside pods).
//
// Pure: the environment and the `scontrol show hostnames` call are arguments.
// Thread-safety: plain functions and values; environment_snapshot() reads `environ`.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace shardguard::agent {

using EnvMap = std::map<std::string, std::string, std::less<>>;

inline constexpr uint16_t kDefaultKubernetesRdzvPort = 29400;
inline constexpr uint16_t kSlurmRdzvPortBase = 20000;  // + SLURM_JOB_ID mod kSlurmRdzvPortSpan
inline constexpr uint16_t kSlurmRdzvPortSpan = 10000;

// `--nnodes N` (min = max = N) or `--nnodes MIN:MAX` (elastic).
struct NodeCount {
  uint32_t min = 1;
  uint32_t max = 1;
  bool operator==(const NodeCount&) const = default;
};

// "4" or "2:4"; kInvalid naming `what` for anything else (0, MIN > MAX, signs, spaces).
Result<NodeCount> parse_node_count(std::string_view text, std::string_view what = "--nnodes");
std::string to_string(const NodeCount& n);  // "4" or "2:4"

struct Endpoint {
  std::string host;
  uint16_t port = 0;
  bool operator==(const Endpoint&) const = default;
};

// "host:port" or "[v6addr]:port", port 1..65535; kInvalid naming `what` otherwise.
Result<Endpoint> parse_endpoint(std::string_view text, std::string_view what = "--rdzv-endpoint");
std::string to_string(const Endpoint& e);  // brackets an IPv6 address again

enum class Scheduler { kManual, kKubernetesIndexedJob, kJobSet, kSlurm };
std::string_view scheduler_name(Scheduler s);

// What the command line gave; every field that is set wins over the environment.
struct PlacementFlags {
  std::optional<NodeCount> nnodes;
  std::optional<uint32_t> node_rank;
  std::optional<Endpoint> rdzv_endpoint;
  std::optional<std::string> secret_file;
  bool any() const { return nnodes || node_rank || rdzv_endpoint; }
};

struct Placement {
  Scheduler scheduler = Scheduler::kManual;
  NodeCount nnodes;
  // Unset only when placed by hand without --node-rank: the first node to bind the
  // endpoint becomes rank 0 (multi-node issue, part 2).
  std::optional<uint32_t> node_rank;
  Endpoint rdzv;
  std::string secret_file;
  // A name for the job when its checkpoint directory has none yet (the directory's own id
  // wins): the Job's or JobSet's name, SLURM_JOB_NAME, else "slurm-<SLURM_JOB_ID>".
  std::string job_id_hint;
  // How often the scheduler restarted the job (SLURM_RESTART_COUNT, JOBSET_RESTART_ATTEMPT).
  std::optional<uint32_t> scheduler_restarts;
  // One line per value and where it came from, for the start-up log and error messages.
  std::vector<std::string> sources;
  std::string describe() const;
};

// Expands a Slurm hostlist ("n[01-03],gpu7") in order; production runs
// `scontrol show hostnames LIST`. Called only for a list with brackets, once.
using SlurmHostnames = std::function<Result<std::vector<std::string>>(std::string_view list)>;

// The placement of this node, or nullopt when nothing asks for more than one node (no
// placement flag, no SHARDGUARD_NNODES/NODE_RANK/RDZV_ENDPOINT, no scheduler variables): a
// single-node run as before. kInvalid names every missing or malformed value at once, with
// the variable or flag that would supply it.
Result<std::optional<Placement>> resolve_placement(const EnvMap& env, const PlacementFlags& flags,
                                                   const SlurmHostnames& slurm_hostnames);

// This process's environment as an EnvMap (for resolve_placement in main).
EnvMap environment_snapshot();

}  // namespace shardguard::agent
