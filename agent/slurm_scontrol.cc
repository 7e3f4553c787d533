#include "agent/slurm_scontrol.h"

#include <sstream>

namespace shardguard::agent {
namespace {

std::string trim(std::string s) {
  s.erase(0, s.find_first_not_of(" \n\t"));
  s.erase(s.find_last_not_of(" \n\t") + 1);
  return s;
}

}  // namespace

Scontrol::Scontrol(CommandRunner run, Duration timeout) : run_(std::move(run)), timeout_(timeout) {}

Result<std::string> Scontrol::scontrol(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {"scontrol"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string what = "scontrol";
  for (const auto& a : args) what += " " + a;
  auto r = run_(argv, timeout_);
  if (!r.ok()) return std::move(r).error().context(what);
  if (r->exit_code != 0)
    return Error(ErrorCode::kIo, what + ": exit " + std::to_string(r->exit_code) + ": " +
                                     trim(r->err.empty() ? r->out : r->err));
  return std::move(r->out);
}

Result<SlurmJobState> Scontrol::show_job(uint32_t job_id) const {
  SG_ASSIGN_OR_RETURN(std::string out, scontrol({"show", "job", "-o", std::to_string(job_id)}));
  return parse_slurm_job(out.substr(0, out.find('\n')));
}

Result<bool> Scontrol::requeue_exit_lists(int code) const {
  SG_ASSIGN_OR_RETURN(std::string out, scontrol({"show", "config"}));
  return slurm_requeue_exit_lists(out, code);
}

Status Scontrol::requeue(uint32_t job_id) const {
  SG_ASSIGN_OR_RETURN(std::string out, scontrol({"requeue", std::to_string(job_id)}));
  return {};
}

Status Scontrol::set_excluded_nodes(uint32_t job_id, const std::string& exc_nodes) const {
  SG_ASSIGN_OR_RETURN(std::string out, scontrol({"update", "JobId=" + std::to_string(job_id),
                                                 "ExcNodeList=" + exc_nodes}));
  return {};
}

Result<std::vector<std::string>> Scontrol::hostnames(std::string_view list) const {
  SG_ASSIGN_OR_RETURN(std::string out, scontrol({"show", "hostnames", std::string(list)}));
  std::vector<std::string> names;
  std::istringstream in(out);
  for (std::string n; in >> n;) names.push_back(n);
  if (names.empty())
    return Error(ErrorCode::kInvalid, "scontrol show hostnames " + std::string(list) + ": no host");
  return names;
}

SlurmHostnames Scontrol::hostnames_function() const {
  Scontrol self = *this;
  return [self](std::string_view list) { return self.hostnames(list); };
}

}  // namespace shardguard::agent
