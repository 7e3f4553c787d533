// Internal to agent/scheduler_env.cc: the field-by-field resolution behind
// resolve_placement(), and the strict number parsers both files use. Not for other modules.
//
// Thread-safety: a Resolver is used by one thread for one call.
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/scheduler_env.h"

namespace shardguard::agent::scheduler_env_detail {

inline constexpr uint32_t kMaxU32 = std::numeric_limits<uint32_t>::max();

// A value that is set and not empty: the kubelet and Slurm leave unused variables empty or
// unset, and an empty value never means anything here.
std::optional<std::string> get(const EnvMap& env, std::string_view key);
// Decimal digits only (no sign, space or suffix), at most `max`; kInvalid naming `what`.
Result<uint32_t> parse_u32(std::string_view text, std::string_view what, uint32_t max);
// 1..65535; kInvalid naming `what`.
Result<uint16_t> parse_port(std::string_view text, std::string_view what);

// Fills a Placement field by field, each from the first source that has it, and collects
// every gap so that one error names them all.
class Resolver {
 public:
  Resolver(const EnvMap& env, Scheduler kind) : env_(env), kind_(kind) { p_.scheduler = kind; }

  // Call in this order (a JobSet rank needs the node count). Each takes the flag, then the
  // SHARDGUARD_* variable, then the scheduler's own, and records what is missing or bad.
  void node_count(const PlacementFlags& flags);
  void node_rank(const PlacementFlags& flags);
  // Runs `hostnames` only when no flag or variable names the coordinator's host.
  void endpoint(const PlacementFlags& flags, const SlurmHostnames& hostnames);
  void secret(const PlacementFlags& flags);
  void hints();  // job id hint, scheduler restart count
  void check_rank_in_range();
  // True once node_count() found exactly one node (a Slurm allocation of one node).
  bool one_node() const { return nnodes_ && nnodes_->min == 1 && nnodes_->max == 1; }

  // The placement, or one kInvalid naming every problem recorded, after the context
  // ("Kubernetes Indexed Job pod (JOB_COMPLETION_INDEX=1)").
  Result<std::optional<Placement>> finish() &&;

 private:
  std::optional<std::string> env(std::string_view key) const { return get(env_, key); }
  // The integer in `key`, or nullopt (unset, or malformed: then a problem is recorded).
  std::optional<uint32_t> env_u32(std::string_view key, uint32_t max = kMaxU32);
  void missing(std::string what) { problems_.push_back("missing " + std::move(what)); }
  void bad(const Error& e) { problems_.push_back(e.message()); }
  void from(std::string what, std::string_view source) {
    p_.sources.push_back(std::move(what) + " <- " + std::string(source));
  }
  void jobset_rank();
  std::optional<std::string> scheduler_host(const SlurmHostnames& hostnames);
  std::optional<std::string> slurm_first_host(const SlurmHostnames& hostnames);
  std::optional<uint16_t> default_port();
  // HOSTNAME without its "-<JOB_COMPLETION_INDEX>": the Indexed Job's name.
  std::optional<std::string> indexed_job_name() const;
  std::string context() const;

  const EnvMap& env_;
  const Scheduler kind_;
  Placement p_;
  std::optional<NodeCount> nnodes_;
  std::string nnodes_source_, rank_source_;
  std::vector<std::string> problems_;
};

}  // namespace shardguard::agent::scheduler_env_detail
