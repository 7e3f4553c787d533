// SlurmCluster: the commands that drive a running cluster: submit, job and node states,
// node lists, resume, cancel (see slurm_cluster.h).
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "tests/support/slurm_cluster.h"

namespace shardguard::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string node_base_state(const std::string& state) {
  return state.substr(0, state.find_first_of("+*~#%$@^-!"));
}

}  // namespace

Result<ProcResult> SlurmCluster::run(const std::vector<std::string>& argv,
                                     std::chrono::milliseconds timeout) const {
  return run_process(argv, child_env(), timeout);
}

std::string SlurmCluster::job_output_path(uint32_t id) const {
  return dir_ + "/jobs/slurm-" + std::to_string(id) + ".out";
}

Result<uint32_t> SlurmCluster::submit(const std::string& script,
                                      const std::vector<std::string>& sbatch_args) {
  const std::string path = dir_ + "/jobs/script-" + std::to_string(++scripts_) + ".sh";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << script;
    out.close();
    if (!out) return Error(ErrorCode::kIo, "write '" + path + "' failed");
  }
  ::chmod(path.c_str(), 0755);
  std::vector<std::string> argv = {"sbatch", "--parsable", "--chdir=" + dir_ + "/jobs",
                                   "--output=" + dir_ + "/jobs/slurm-%j.out"};
  argv.insert(argv.end(), sbatch_args.begin(), sbatch_args.end());
  argv.push_back(path);
  auto r = run(argv);
  if (!r.ok()) return r.error();
  if (r->exit_code != 0)
    return Error(ErrorCode::kIo,
                 "sbatch '" + path + "' exited " + std::to_string(r->exit_code) + ": " + r->err);
  const long id = std::atol(r->out.substr(0, r->out.find(';')).c_str());
  if (id <= 0) return Error(ErrorCode::kIo, "sbatch printed no job id: '" + r->out + "'");
  return static_cast<uint32_t>(id);
}

Result<SlurmJob> SlurmCluster::job(uint32_t id) const {
  auto r = run({"scontrol", "show", "job", "-o", std::to_string(id)}, 15s);
  if (!r.ok()) return r.error();
  if (r->exit_code != 0)
    return Error(ErrorCode::kNotFound,
                 "scontrol show job " + std::to_string(id) + ": " + r->err + r->out);
  SlurmJob j;
  j.fields = parse_scontrol_record(r->out.substr(0, r->out.find('\n')));
  if (j.fields.empty())
    return Error(ErrorCode::kIo, "scontrol show job " + std::to_string(id) + ": no record");
  return j;
}

Result<SlurmJob> SlurmCluster::wait_job_state(uint32_t id, const std::vector<std::string>& states,
                                              std::chrono::milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  std::string last = "(none)";
  while (true) {
    auto j = job(id);
    if (j.ok()) {
      last = j->state() + " (Reason=" + j->reason() + ")";
      if (std::find(states.begin(), states.end(), j->state()) != states.end()) return j;
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(100ms);
  }
  std::string want;
  for (const auto& s : states) want += (want.empty() ? "" : "|") + s;
  return Error(ErrorCode::kTimeout, "job " + std::to_string(id) + " not " + want + " within " +
                                        std::to_string(timeout.count()) + " ms; last " + last);
}

Result<std::map<std::string, std::string>> SlurmCluster::node(const std::string& name) const {
  auto r = run({"scontrol", "show", "node", "-o", name}, 15s);
  if (!r.ok()) return r.error();
  if (r->exit_code != 0)
    return Error(ErrorCode::kNotFound, "scontrol show node " + name + ": " + r->err);
  return parse_scontrol_record(r->out.substr(0, r->out.find('\n')));
}

Result<std::string> SlurmCluster::node_state(const std::string& name) const {
  auto n = node(name);
  if (!n.ok()) return n.error();
  return node_base_state((*n)["State"]);
}

Result<std::string> SlurmCluster::wait_node_state(const std::string& name,
                                                  const std::vector<std::string>& states,
                                                  std::chrono::milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  std::string last = "(none)";
  while (true) {
    auto n = node(name);
    if (n.ok()) {
      last = (*n)["State"];
      const std::string base = node_base_state(last);
      if (std::find(states.begin(), states.end(), base) != states.end()) return last;
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(100ms);
  }
  return Error(ErrorCode::kTimeout, "node " + name + " not in the wanted state within " +
                                        std::to_string(timeout.count()) + " ms; last " + last);
}

Result<std::vector<std::string>> SlurmCluster::hostnames(const std::string& nodelist) const {
  auto r = run({"scontrol", "show", "hostnames", nodelist}, 15s);
  if (!r.ok()) return r.error();
  if (r->exit_code != 0)
    return Error(ErrorCode::kInvalid, "scontrol show hostnames " + nodelist + ": " + r->err);
  std::vector<std::string> names;
  std::istringstream in(r->out);
  for (std::string n; in >> n;) names.push_back(n);
  return names;
}

Status SlurmCluster::resume_node(const std::string& name) {
  auto r = run({"scontrol", "update", "NodeName=" + name, "State=RESUME"}, 15s);
  if (!r.ok()) return r.error();
  if (r->exit_code != 0)
    return Error(ErrorCode::kIo, "scontrol update NodeName=" + name + " State=RESUME: " + r->err);
  return ok_status();
}

Status SlurmCluster::cancel_all_jobs(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::set<std::string> cancelled;
  while (true) {
    auto q = run({"squeue", "-h", "-o", "%A"}, 15s);
    if (!q.ok()) return q.error();
    std::vector<std::string> argv = {"scancel"};
    std::istringstream in(q->out);
    bool any = false;
    for (std::string id; in >> id;) {
      any = true;
      if (cancelled.insert(id).second) argv.push_back(id);
    }
    if (!any) return ok_status();
    if (Clock::now() >= deadline)
      return Error(ErrorCode::kTimeout, "jobs still queued after scancel: " + q->out);
    if (argv.size() > 1) {
      auto c = run(argv, 15s);
      if (!c.ok()) return c.error();
    }
    std::this_thread::sleep_for(200ms);  // completing jobs leave the queue after KillWait
  }
}

std::vector<pid_t> SlurmCluster::job_pids(uint32_t id) const {
  return pids_with_env(
      {"SLURM_CLUSTER_NAME=" + cluster_name_, "SLURM_JOB_ID=" + std::to_string(id)});
}

}  // namespace shardguard::testing
