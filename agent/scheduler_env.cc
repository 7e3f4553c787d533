#include "agent/scheduler_env.h"

#include "agent/scheduler_env_resolver.h"

extern char** environ;

namespace shardguard::agent {
namespace {

using namespace scheduler_env_detail;

Scheduler detect(const EnvMap& env) {
  if (get(env, "SLURM_JOB_ID")) return Scheduler::kSlurm;
  if (get(env, "JOBSET_NAME")) return Scheduler::kJobSet;
  if (get(env, "JOB_COMPLETION_INDEX")) return Scheduler::kKubernetesIndexedJob;
  return Scheduler::kManual;
}

}  // namespace

Result<NodeCount> parse_node_count(std::string_view text, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return Error(ErrorCode::kInvalid,
                 std::string(what) + "='" + std::string(text) + "': " + std::string(why));
  };
  const size_t colon = text.find(':');
  auto min = parse_u32(text.substr(0, colon), what, kMaxU32);
  auto max =
      colon == std::string_view::npos ? min : parse_u32(text.substr(colon + 1), what, kMaxU32);
  if (!min.ok() || !max.ok()) return bad("expected N or MIN:MAX (whole numbers)");
  if (*min == 0) return bad("a job needs at least 1 node");
  if (*min > *max) return bad("MIN is above MAX");
  return NodeCount{*min, *max};
}

std::string to_string(const NodeCount& n) {
  return n.min == n.max ? std::to_string(n.min)
                        : std::to_string(n.min) + ":" + std::to_string(n.max);
}

Result<Endpoint> parse_endpoint(std::string_view text, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return Error(ErrorCode::kInvalid,
                 std::string(what) + "='" + std::string(text) + "': " + std::string(why));
  };
  std::string_view host, port;
  if (text.starts_with('[')) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return bad("expected [IPV6]:PORT");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("expected HOST:PORT");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos)
      return bad("an IPv6 address needs brackets: [ADDR]:PORT");
  }
  if (host.empty()) return bad("empty host");
  auto p = parse_port(port, what);
  if (!p.ok()) return bad("bad port '" + std::string(port) + "' (1 to 65535)");
  return Endpoint{std::string(host), *p};
}

std::string to_string(const Endpoint& e) {
  const bool v6 = e.host.find(':') != std::string::npos;
  return (v6 ? "[" + e.host + "]" : e.host) + ":" + std::to_string(e.port);
}

std::string_view scheduler_name(Scheduler s) {
  switch (s) {
    case Scheduler::kManual:
      return "by hand";
    case Scheduler::kKubernetesIndexedJob:
      return "Kubernetes Indexed Job";
    case Scheduler::kJobSet:
      return "Kubernetes JobSet";
    case Scheduler::kSlurm:
      return "Slurm";
  }
  return "?";
}

std::string Placement::describe() const {
  std::string text = std::string(scheduler_name(scheduler)) + ": node " +
                     (node_rank ? std::to_string(*node_rank) : std::string("(first to bind)")) +
                     " of " + to_string(nnodes) + ", coordinator " + to_string(rdzv);
  if (!job_id_hint.empty()) text += ", job '" + job_id_hint + "'";
  for (const auto& s : sources) text += "\n  " + s;
  return text;
}

Result<std::optional<Placement>> resolve_placement(const EnvMap& env, const PlacementFlags& flags,
                                                   const SlurmHostnames& slurm_hostnames) {
  const Scheduler kind = detect(env);
  const bool asked_by_env = get(env, "SHARDGUARD_NNODES") || get(env, "SHARDGUARD_NODE_RANK") ||
                            get(env, "SHARDGUARD_RDZV_ENDPOINT");
  if (kind == Scheduler::kManual && !flags.any() && !asked_by_env)
    return std::optional<Placement>();
  Resolver r(env, kind);
  r.node_count(flags);
  // A scheduler's job of one node (sbatch -N1, srun of one task) is a single-node run, as
  // with torchrun --standalone: no coordinator, no secret. Flags or SHARDGUARD_* ask for
  // the multi-node path explicitly.
  if (!flags.any() && !asked_by_env && r.one_node()) return std::optional<Placement>();
  r.node_rank(flags);  // after the count: a JobSet rank needs it
  r.endpoint(flags, slurm_hostnames);
  r.secret(flags);
  r.hints();
  r.check_rank_in_range();
  return std::move(r).finish();
}

EnvMap environment_snapshot() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq != std::string_view::npos) env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

}  // namespace shardguard::agent
