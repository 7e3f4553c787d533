#include "agent/slurm_policy.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <sstream>

#include "agent/signal_source.h"

namespace shardguard::agent {
namespace {

std::map<std::string, std::string> record_fields(std::string_view line) {
  std::map<std::string, std::string> fields;
  std::istringstream in{std::string(line)};
  std::string token, last;
  while (in >> token) {
    const auto eq = token.find('=');
    if (eq == std::string::npos || eq == 0) {
      if (!last.empty()) fields[last] += " " + token;
      continue;
    }
    last = token.substr(0, eq);
    fields[last] = token.substr(eq + 1);
  }
  return fields;
}

std::optional<uint32_t> to_u32(std::string_view s) {
  uint32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

bool unset(const std::string& v) { return v.empty() || v == "(null)" || v == "None"; }

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// scancel: the job is ending (COMPLETING, or CANCELLED), not for its time limit, not in a
// preemption, and not requeued.
bool cancelled_by_user(const SlurmJobState& j, uint32_t restarts_at_start) {
  if (j.state == "CANCELLED") return true;
  return j.state == "COMPLETING" && j.reason != "TimeLimit" && !j.preempting &&
         j.restarts == restarts_at_start;
}

bool requeued_already(const SlurmJobState& j, uint32_t restarts_at_start) {
  static const char* kPending[] = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                                   "SPECIAL_EXIT"};
  return j.restarts > restarts_at_start ||
         std::find(std::begin(kPending), std::end(kPending), j.state) != std::end(kPending);
}

SlurmRequeueDecision no(SlurmCase c, std::string why) {
  return SlurmRequeueDecision{c, false, "", std::move(why)};
}

// The case when Slurm itself explains nothing more: by the first notice of the run.
SlurmCase by_notice(const std::vector<SlurmStopSeen>& stops) {
  if (stops.empty()) return SlurmCase::kNoNotice;
  const std::string& n = stops.front().notice;
  if (starts_with(n, "drain")) return SlurmCase::kDrain;
  if (n == "sigint") return SlurmCase::kInterrupted;
  if (n == "sigterm") return SlurmCase::kUnexplainedTerm;
  if (starts_with(n, "sig")) return SlurmCase::kSignalLead;
  if (n == "node-unhealthy") return SlurmCase::kUnhealthy;
  return SlurmCase::kMachineNotice;
}

std::string case_text(SlurmCase c) {
  switch (c) {
    case SlurmCase::kUnhealthy:
      return "a node failed a health check";
    case SlurmCase::kTimeLimit:
      return "the time limit";
    case SlurmCase::kPreempted:
      return "preemption (Slurm requeues only a job still running when GraceTime ends)";
    case SlurmCase::kSignalLead:
      return "the job's --signal before its time limit";
    case SlurmCase::kMachineNotice:
      return "the machine is going away";
    case SlurmCase::kUnexplainedTerm:
      return "a SIGTERM while the job runs";
    case SlurmCase::kNoNotice:
      return "the ranks exited 75 (preempted) by themselves";
    default:
      return std::string(slurm_case_name(c));
  }
}

}  // namespace

Result<SlurmJobState> parse_slurm_job(std::string_view record) {
  auto f = record_fields(record);
  SlurmJobState j;
  auto id = to_u32(f["JobId"]);
  if (!id)
    return Error(ErrorCode::kInvalid,
                 "scontrol show job: no JobId in '" + std::string(record.substr(0, 80)) + "'");
  j.job_id = *id;
  j.state = f["JobState"];
  if (j.state.empty())
    return Error(ErrorCode::kInvalid,
                 "scontrol show job " + std::to_string(j.job_id) + ": no JobState");
  j.reason = f["Reason"];
  j.requeueable = f["Requeue"] == "1";
  j.restarts = to_u32(f["Restarts"]).value_or(0);
  j.preempting = !unset(f["PreemptTime"]);
  j.partition = f["Partition"];
  j.exc_nodes = unset(f["ExcNodeList"]) ? "" : f["ExcNodeList"];
  j.batch_host = unset(f["BatchHost"]) ? "" : f["BatchHost"];
  return j;
}

Result<SlurmSignalSpec> parse_slurm_signal_spec(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::kInvalid, "Slurm --signal '" + std::string(text) + "': " + why);
  };
  SlurmSignalSpec s;
  std::string_view rest = text;
  const auto colon = rest.find(':');
  if (colon != std::string_view::npos) {
    const std::string_view flags = rest.substr(0, colon);
    if (flags.empty() || flags.find_first_not_of("RB") != std::string_view::npos)
      return bad("the part before ':' must be R, B or RB");
    s.batch_only = flags.find('B') != std::string_view::npos;
    rest.remove_prefix(colon + 1);
  }
  const auto at = rest.find('@');
  if (at != std::string_view::npos) {
    auto secs = to_u32(rest.substr(at + 1));
    if (!secs || *secs > 65535) return bad("the time after '@' must be 0..65535 seconds");
    s.lead = std::chrono::seconds(*secs);
    rest = rest.substr(0, at);
  }
  auto sig = parse_signal(rest);
  if (!sig.ok()) return bad(sig.error().message());
  s.signal = *sig;
  return s;
}

Result<std::optional<SlurmJobEnv>> read_slurm_job_env(const EnvMap& env) {
  auto get = [&](std::string_view k) -> std::string {
    auto it = env.find(k);
    return it == env.end() ? std::string() : it->second;
  };
  const std::string off = get("SHARDGUARD_SLURM");
  if (off == "off" || off == "0") return std::optional<SlurmJobEnv>();
  if (!off.empty() && off != "on" && off != "1")
    return Error(ErrorCode::kInvalid, "SHARDGUARD_SLURM='" + off + "' must be on or off");
  const std::string id = get("SLURM_JOB_ID");
  if (id.empty()) return std::optional<SlurmJobEnv>();
  auto number = [&](std::string_view key, const std::string& v) -> Result<uint32_t> {
    auto n = to_u32(v);
    if (!n) return Error(ErrorCode::kInvalid, std::string(key) + "='" + v + "' is not a number");
    return *n;
  };
  SlurmJobEnv e;
  SG_ASSIGN_OR_RETURN(e.job_id, number("SLURM_JOB_ID", id));
  if (auto r = get("SLURM_RESTART_COUNT"); !r.empty()) {
    SG_ASSIGN_OR_RETURN(e.restart_count, number("SLURM_RESTART_COUNT", r));
  }
  if (auto p = get("SLURM_PROCID"); !p.empty()) {
    SG_ASSIGN_OR_RETURN(uint32_t procid, number("SLURM_PROCID", p));
    e.procid = procid;
  }
  if (auto n = get("SLURM_NODEID"); !n.empty()) {
    SG_ASSIGN_OR_RETURN(uint32_t node_id, number("SLURM_NODEID", n));
    e.node_id = node_id;
  }
  e.job_nodes = get("SLURM_JOB_NODELIST");
  e.node = get("SLURMD_NODENAME");
  e.partition = get("SLURM_JOB_PARTITION");
  if (auto sig = get("SBATCH_SIGNAL"); !sig.empty()) {
    SG_ASSIGN_OR_RETURN(auto spec, parse_slurm_signal_spec(sig));
    e.signal = spec;
  }
  return std::optional<SlurmJobEnv>(std::move(e));
}

bool slurm_requeue_exit_lists(std::string_view show_config, int code) {
  std::istringstream in{std::string(show_config)};
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq);
    key.erase(key.find_last_not_of(' ') + 1);
    if (key != "RequeueExit") continue;
    std::istringstream values(line.substr(eq + 1));
    for (std::string v; std::getline(values, v, ',');) {
      v.erase(0, v.find_first_not_of(' '));
      v.erase(v.find_last_not_of(' ') + 1);
      // A range "70-79" is allowed too.
      const auto dash = v.find('-');
      auto lo = to_u32(v.substr(0, dash));
      auto hi = dash == std::string::npos ? lo : to_u32(v.substr(dash + 1));
      if (lo && hi && code >= static_cast<int>(*lo) && code <= static_cast<int>(*hi)) return true;
    }
  }
  return false;
}

std::string add_excluded_node(std::string_view exc_nodes, std::string_view node) {
  std::string out(exc_nodes);
  std::istringstream in(out);
  for (std::string n; std::getline(in, n, ',');)
    if (n == node) return out;
  return out.empty() ? std::string(node) : out + "," + std::string(node);
}

std::string_view slurm_case_name(SlurmCase c) {
  switch (c) {
    case SlurmCase::kNotStopped:
      return "not-stopped";
    case SlurmCase::kUnknown:
      return "unknown";
    case SlurmCase::kRequeuedBySlurm:
      return "requeued-by-slurm";
    case SlurmCase::kCancelled:
      return "cancelled";
    case SlurmCase::kUnhealthy:
      return "node-unhealthy";
    case SlurmCase::kTimeLimit:
      return "time-limit";
    case SlurmCase::kPreempted:
      return "preempted";
    case SlurmCase::kSignalLead:
      return "signal-lead";
    case SlurmCase::kMachineNotice:
      return "machine-notice";
    case SlurmCase::kDrain:
      return "drain";
    case SlurmCase::kInterrupted:
      return "interrupted";
    case SlurmCase::kUnexplainedTerm:
      return "sigterm";
    case SlurmCase::kNoNotice:
      return "no-notice";
    case SlurmCase::kOtherNode:
      return "other-node";
  }
  return "unknown";
}

SlurmRequeueDecision decide_slurm_requeue(const SlurmRunOutcome& o) {
  if (o.exit_code != 75)
    return no(SlurmCase::kNotStopped, "the run ended with exit " + std::to_string(o.exit_code) +
                                          ", not after an emergency checkpoint: not requeued");
  // Before any read: the other nodes of a multi-node job read nothing (one read per notice
  // for the whole job, not one per node).
  if (!o.is_requeuer)
    return no(SlurmCase::kOtherNode,
              "a node of a multi-node job: the node that runs the job's coordinator (its first "
              "node) reads the job's state and decides the requeue, once for the job");
  std::vector<const SlurmJobState*> views;
  for (const auto& s : o.stops)
    if (s.job) views.push_back(&*s.job);
  if (o.at_end) views.push_back(&*o.at_end);
  if (views.empty())
    return no(SlurmCase::kUnknown,
              "the job's state could not be read (scontrol): not requeued; RequeueExit=75 in "
              "slurm.conf or `scontrol requeue` by hand brings it back");
  const SlurmJobState& latest = *views.back();
  auto any = [&](auto pred) {
    return std::any_of(views.begin(), views.end(), [&](auto* v) { return pred(*v); });
  };

  if (any([&](const SlurmJobState& j) { return requeued_already(j, o.restarts_at_start); })) {
    SlurmRequeueDecision d = no(SlurmCase::kRequeuedBySlurm,
                                "Slurm has requeued the job already (scontrol requeue, or its "
                                "own preemption requeue): never twice");
    d.exclude_node = o.unhealthy_node;
    return d;
  }
  if (any([&](const SlurmJobState& j) { return cancelled_by_user(j, o.restarts_at_start); }))
    return no(SlurmCase::kCancelled,
              "the job was cancelled (scancel): it ends CANCELLED, never requeued");

  SlurmCase c = by_notice(o.stops);
  if (!o.unhealthy_node.empty())
    c = SlurmCase::kUnhealthy;
  else if (any([](const SlurmJobState& j) {
             return j.reason == "TimeLimit" || j.state == "TIMEOUT";
           }))
    c = SlurmCase::kTimeLimit;
  else if (any([](const SlurmJobState& j) { return j.preempting; }))
    c = SlurmCase::kPreempted;
  if (c == SlurmCase::kDrain)
    return no(c,
              "an operator's drain stops the job here: not requeued (`scontrol requeue` "
              "brings it back)");
  if (c == SlurmCase::kInterrupted) return no(c, "interrupted by a person (SIGINT): not requeued");

  const std::string cause = case_text(c);
  if (!latest.requeueable)
    return no(c, "stopped by " + cause +
                     ", but the job is not requeueable (--no-requeue, or JobRequeue=0 without "
                     "--requeue): it ends here");
  if (o.slurm_requeues_exit_75 && c != SlurmCase::kUnhealthy)
    return no(c, "stopped by " + cause + "; Slurm requeues exit 75 itself (RequeueExit=75)");
  SlurmRequeueDecision d{c, true, "", "stopped by " + cause + ": requeued"};
  if (c == SlurmCase::kUnhealthy) {
    d.exclude_node = o.unhealthy_node;
    d.why = "stopped because " + cause + ": requeued without node " + o.unhealthy_node;
  }
  return d;
}

}  // namespace shardguard::agent
