#include "agent/scheduler_env_resolver.h"

#include <charconv>

namespace shardguard::agent::scheduler_env_detail {

std::optional<std::string> get(const EnvMap& env, std::string_view key) {
  auto it = env.find(key);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

Result<uint32_t> parse_u32(std::string_view text, std::string_view what, uint32_t max) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end || v > max) {
    return Error(ErrorCode::kInvalid, std::string(what) + "='" + std::string(text) +
                                          "': not an integer from 0 to " + std::to_string(max));
  }
  return static_cast<uint32_t>(v);
}

Result<uint16_t> parse_port(std::string_view text, std::string_view what) {
  SG_ASSIGN_OR_RETURN(uint32_t port, parse_u32(text, what, 65535));
  if (port == 0) return Error(ErrorCode::kInvalid, std::string(what) + ": port 0 is not allowed");
  return static_cast<uint16_t>(port);
}

std::optional<uint32_t> Resolver::env_u32(std::string_view key, uint32_t max) {
  auto text = env(key);
  if (!text) return std::nullopt;
  auto v = parse_u32(*text, key, max);
  if (!v.ok()) {
    bad(v.error());
    return std::nullopt;
  }
  return *v;
}

void Resolver::node_count(const PlacementFlags& flags) {
  auto set = [&](NodeCount n, std::string_view source) {
    nnodes_ = n;
    nnodes_source_ = source;
    from("nodes " + to_string(n), source);
  };
  if (flags.nnodes) return set(*flags.nnodes, "--nnodes");
  if (auto text = env("SHARDGUARD_NNODES")) {
    auto n = parse_node_count(*text, "SHARDGUARD_NNODES");
    return n.ok() ? set(*n, "SHARDGUARD_NNODES") : bad(n.error());
  }
  switch (kind_) {
    case Scheduler::kSlurm:
      // srun sets the step's count; the batch script only the allocation's.
      for (const char* key : {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"}) {
        if (!env(key)) continue;
        const auto n = env_u32(key);
        if (n && *n == 0) return bad(Error(ErrorCode::kInvalid, std::string(key) + "=0: no nodes"));
        if (n) set({*n, *n}, key);
        return;
      }
      return missing(
          "node count (SLURM_NNODES is not set: start shardguard with srun, or pass --nnodes)");
    case Scheduler::kJobSet:
      // NonIndexed child Jobs have one pod each: the node count is the number of Jobs.
      if (!env("JOB_COMPLETION_INDEX")) {
        if (auto r = env_u32("REPLICATED_JOB_REPLICAS"); r && *r > 0)
          return set({*r, *r}, "REPLICATED_JOB_REPLICAS (one pod per child Job)");
      }
      return missing(
          "node count (set SHARDGUARD_NNODES to replicas x parallelism, or pass --nnodes)");
    case Scheduler::kKubernetesIndexedJob:
      return missing(
          "node count (set SHARDGUARD_NNODES to the Job's completions, or pass --nnodes)");
    case Scheduler::kManual:
      return missing("node count (pass --nnodes N|MIN:MAX or set SHARDGUARD_NNODES)");
  }
}

void Resolver::node_rank(const PlacementFlags& flags) {
  auto set = [&](uint32_t r, std::string_view source) {
    p_.node_rank = r;
    rank_source_ = source;
    from("node rank " + std::to_string(r), source);
  };
  if (flags.node_rank) return set(*flags.node_rank, "--node-rank");
  if (env("SHARDGUARD_NODE_RANK")) {
    if (auto r = env_u32("SHARDGUARD_NODE_RANK")) set(*r, "SHARDGUARD_NODE_RANK");
    return;
  }
  switch (kind_) {
    case Scheduler::kSlurm:
      // A second task on this node would claim the same node rank.
      if (auto local = env("SLURM_LOCALID"); local && *local != "0") {
        return bad(Error(ErrorCode::kInvalid, "SLURM_LOCALID=" + *local +
                                                  ": more than one shardguard on this node "
                                                  "(run one per node: srun --ntasks-per-node=1)"));
      }
      if (!env("SLURM_NODEID"))
        return missing("node rank (SLURM_NODEID is not set: start shardguard with srun)");
      if (auto r = env_u32("SLURM_NODEID")) set(*r, "SLURM_NODEID");
      return;
    case Scheduler::kKubernetesIndexedJob:
      if (auto r = env_u32("JOB_COMPLETION_INDEX")) set(*r, "JOB_COMPLETION_INDEX");
      return;
    case Scheduler::kJobSet:
      return jobset_rank();
    case Scheduler::kManual:
      return;  // the first node to bind the endpoint becomes rank 0
  }
}

// rank = JOB_INDEX x P + JOB_COMPLETION_INDEX, P = pods per child Job.
void Resolver::jobset_rank() {
  const bool indexed = env("JOB_COMPLETION_INDEX").has_value();
  const std::optional<uint32_t> pod = indexed ? env_u32("JOB_COMPLETION_INDEX") : 0u;
  const std::optional<uint32_t> replicas = env_u32("REPLICATED_JOB_REPLICAS");
  std::optional<uint32_t> job = env_u32("JOB_INDEX");
  if (!env("JOB_INDEX")) {
    if (replicas.value_or(1) > 1)
      return missing(
          "JOB_INDEX (annotation jobset.sigs.k8s.io/job-index; REPLICATED_JOB_REPLICAS=" +
          std::to_string(*replicas) + ")");
    job = 0;
  }
  if (!pod || !job) return;
  if (replicas && *job >= *replicas) {
    return bad(Error(ErrorCode::kInvalid,
                     "JOB_INDEX=" + std::to_string(*job) +
                         " is not below REPLICATED_JOB_REPLICAS=" + std::to_string(*replicas)));
  }
  const std::string source =
      indexed ? "JOB_INDEX x pods per Job + JOB_COMPLETION_INDEX" : "JOB_INDEX";
  if (*job == 0) {
    p_.node_rank = *pod;
    rank_source_ = source;
    return from("node rank " + std::to_string(*pod), source);
  }
  uint32_t per_job = 1;
  if (indexed) {
    if (!replicas || !nnodes_)
      return missing("pods per child Job (JOB_INDEX=" + std::to_string(*job) +
                     " needs REPLICATED_JOB_REPLICAS and the node count)");
    if (nnodes_->max % *replicas != 0) {
      return bad(Error(ErrorCode::kInvalid, "the node count " + std::to_string(nnodes_->max) +
                                                " is not a multiple of REPLICATED_JOB_REPLICAS=" +
                                                std::to_string(*replicas)));
    }
    per_job = nnodes_->max / *replicas;
    if (*pod >= per_job) {
      return bad(Error(ErrorCode::kInvalid, "JOB_COMPLETION_INDEX=" + std::to_string(*pod) +
                                                " is not below the pods per Job (" +
                                                std::to_string(per_job) + ")"));
    }
  }
  p_.node_rank = *job * per_job + *pod;
  rank_source_ = source;
  from("node rank " + std::to_string(*p_.node_rank), source);
}

std::optional<std::string> Resolver::indexed_job_name() const {
  auto host = env("HOSTNAME");
  auto index = env("JOB_COMPLETION_INDEX");
  if (!host || !index) return std::nullopt;
  const std::string suffix = "-" + *index;
  if (host->size() <= suffix.size() || !host->ends_with(suffix)) return std::nullopt;
  return host->substr(0, host->size() - suffix.size());
}

std::optional<std::string> Resolver::slurm_first_host(const SlurmHostnames& hostnames) {
  std::string key = "SLURM_STEP_NODELIST";
  auto list = env(key);
  if (!list) list = env(key = "SLURM_JOB_NODELIST");
  if (!list) {
    missing("coordinator host (SLURM_JOB_NODELIST is not set)");
    return std::nullopt;
  }
  // Ranges only appear inside brackets: a plain list's first host is its first item.
  if (list->find('[') == std::string::npos) {
    const std::string first = list->substr(0, list->find(','));
    if (first.empty()) {
      problems_.push_back(key + "='" + *list + "': no first host");
      return std::nullopt;
    }
    from("coordinator host " + first, "first host of " + key);
    return first;
  }
  auto hosts = hostnames ? hostnames(*list)
                         : Result<std::vector<std::string>>(
                               Error(ErrorCode::kUnsupported, "no hostlist expander"));
  if (!hosts.ok() || hosts->empty() || hosts->front().empty()) {
    problems_.push_back("first host of " + key + "='" + *list +
                        "': " + (hosts.ok() ? std::string("no hosts") : hosts.error().message()));
    return std::nullopt;
  }
  from("coordinator host " + hosts->front(), "scontrol show hostnames " + key);
  return hosts->front();
}

std::optional<std::string> Resolver::scheduler_host(const SlurmHostnames& hostnames) {
  const auto service = env("SHARDGUARD_RDZV_SERVICE");
  switch (kind_) {
    case Scheduler::kSlurm:
      return slurm_first_host(hostnames);
    case Scheduler::kKubernetesIndexedJob: {
      auto job = indexed_job_name();
      if (!job)
        missing(
            "job name (HOSTNAME must be <job-name>-<JOB_COMPLETION_INDEX>, as the Job controller "
            "sets it)");
      if (!service)
        missing(
            "coordinator Service (set SHARDGUARD_RDZV_SERVICE to the headless Service that is the "
            "pods' subdomain)");
      if (!job || !service) return std::nullopt;
      from("coordinator host " + *job + "-0." + *service, "HOSTNAME + SHARDGUARD_RDZV_SERVICE");
      return *job + "-0." + *service;
    }
    case Scheduler::kJobSet: {
      if (auto c = env("JOBSET_COORDINATOR")) {
        from("coordinator host " + *c, "JOBSET_COORDINATOR");
        return c;
      }
      auto js = env("JOBSET_NAME");
      auto rjob = env("REPLICATED_JOB_NAME");
      if (!rjob) {
        missing(
            "coordinator host (set JOBSET_COORDINATOR from the JobSet's coordinator annotation, or "
            "REPLICATED_JOB_NAME)");
        return std::nullopt;
      }
      const std::string host = *js + "-" + *rjob + "-0-0." + service.value_or(*js);
      from("coordinator host " + host,
           service ? "JOBSET_NAME + REPLICATED_JOB_NAME + SHARDGUARD_RDZV_SERVICE"
                   : "JOBSET_NAME + REPLICATED_JOB_NAME");
      return host;
    }
    case Scheduler::kManual:
      missing("coordinator (pass --rdzv-endpoint HOST:PORT or set SHARDGUARD_RDZV_ENDPOINT)");
      return std::nullopt;
  }
  return std::nullopt;
}

std::optional<uint16_t> Resolver::default_port() {
  switch (kind_) {
    case Scheduler::kKubernetesIndexedJob:
    case Scheduler::kJobSet:
      from("coordinator port " + std::to_string(kDefaultKubernetesRdzvPort),
           "the Kubernetes default");
      return kDefaultKubernetesRdzvPort;
    case Scheduler::kSlurm: {
      auto id = env_u32("SLURM_JOB_ID");
      if (!id) return std::nullopt;
      const auto port = static_cast<uint16_t>(kSlurmRdzvPortBase + *id % kSlurmRdzvPortSpan);
      from("coordinator port " + std::to_string(port), "20000 + SLURM_JOB_ID mod 10000");
      return port;
    }
    case Scheduler::kManual:
      return std::nullopt;  // scheduler_host() already said what is missing
  }
  return std::nullopt;
}

void Resolver::endpoint(const PlacementFlags& flags, const SlurmHostnames& hostnames) {
  if (flags.rdzv_endpoint) {
    p_.rdzv = *flags.rdzv_endpoint;
    return from("coordinator " + to_string(p_.rdzv), "--rdzv-endpoint");
  }
  if (auto text = env("SHARDGUARD_RDZV_ENDPOINT")) {
    auto e = parse_endpoint(*text, "SHARDGUARD_RDZV_ENDPOINT");
    if (!e.ok()) return bad(e.error());
    p_.rdzv = *e;
    return from("coordinator " + to_string(p_.rdzv), "SHARDGUARD_RDZV_ENDPOINT");
  }
  std::optional<std::string> host = env("SHARDGUARD_RDZV_HOST");
  if (host)
    from("coordinator host " + *host, "SHARDGUARD_RDZV_HOST");
  else
    host = scheduler_host(hostnames);
  std::optional<uint16_t> port;
  if (auto text = env("SHARDGUARD_RDZV_PORT")) {
    auto p = parse_port(*text, "SHARDGUARD_RDZV_PORT");
    if (!p.ok()) return bad(p.error());
    port = *p;
    from("coordinator port " + *text, "SHARDGUARD_RDZV_PORT");
  } else {
    port = default_port();
    if (!port && kind_ == Scheduler::kManual && host)
      missing("coordinator port (set SHARDGUARD_RDZV_PORT or pass --rdzv-endpoint HOST:PORT)");
  }
  if (host && port) p_.rdzv = Endpoint{*host, *port};
}

void Resolver::secret(const PlacementFlags& flags) {
  if (flags.secret_file)
    p_.secret_file = *flags.secret_file;
  else if (auto f = env("SHARDGUARD_SECRET_FILE"))
    p_.secret_file = *f;
  else
    return missing(
        "secret file (pass --secret-file or set SHARDGUARD_SECRET_FILE; `shardguard secret "
        "generate FILE` writes one)");
  from("secret file " + p_.secret_file,
       flags.secret_file ? "--secret-file" : "SHARDGUARD_SECRET_FILE");
}

void Resolver::hints() {
  switch (kind_) {
    case Scheduler::kKubernetesIndexedJob:
      p_.job_id_hint = indexed_job_name().value_or("");
      break;
    case Scheduler::kJobSet:
      p_.job_id_hint = env("JOBSET_NAME").value_or("");
      p_.scheduler_restarts = env_u32("JOBSET_RESTART_ATTEMPT");
      break;
    case Scheduler::kSlurm:
      p_.job_id_hint = env("SLURM_JOB_NAME").value_or("slurm-" + env("SLURM_JOB_ID").value_or(""));
      // Unset until the first requeue.
      p_.scheduler_restarts = env("SLURM_RESTART_COUNT") ? env_u32("SLURM_RESTART_COUNT") : 0u;
      break;
    case Scheduler::kManual:
      break;
  }
}

void Resolver::check_rank_in_range() {
  if (!p_.node_rank || !nnodes_ || *p_.node_rank < nnodes_->max) return;
  problems_.push_back("node rank " + std::to_string(*p_.node_rank) + " (" + rank_source_ +
                      ") is not below the node count " + to_string(*nnodes_) + " (" +
                      nnodes_source_ + ")");
}

std::string Resolver::context() const {
  switch (kind_) {
    case Scheduler::kKubernetesIndexedJob:
      return "Kubernetes Indexed Job pod (JOB_COMPLETION_INDEX=" +
             env("JOB_COMPLETION_INDEX").value_or("") + ")";
    case Scheduler::kJobSet:
      return "JobSet pod (JOBSET_NAME=" + env("JOBSET_NAME").value_or("") + ")";
    case Scheduler::kSlurm:
      return "Slurm job (SLURM_JOB_ID=" + env("SLURM_JOB_ID").value_or("") + ")";
    case Scheduler::kManual:
      return "multi-node run";
  }
  return "";
}

Result<std::optional<Placement>> Resolver::finish() && {
  if (!problems_.empty()) {
    std::string text = context() + ": cannot place this node: ";
    for (size_t i = 0; i < problems_.size(); ++i) text += (i ? "; " : "") + problems_[i];
    return Error(ErrorCode::kInvalid, text);
  }
  p_.nnodes = *nnodes_;
  return std::optional<Placement>(std::move(p_));
}

}  // namespace shardguard::agent::scheduler_env_detail
