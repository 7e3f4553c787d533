// SlurmCluster: starting, driving and stopping the daemons (see slurm_cluster.h).
#include "tests/support/slurm_cluster.h"

#include <dirent.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "tests/support/fixture_text.h"
#include "tests/support/temp_dir.h"

namespace shardguard::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* kMarker = "SHARDGUARD_SLURM_FIXTURE";
constexpr const char* kDirPrefix = "sg-slurm-";

// "pid starttime" of this process: names it for good, even after its pid is reused.
std::string self_identity() {
  const pid_t pid = ::getpid();
  return std::to_string(pid) + " " + std::to_string(process_start_time(pid).value_or(0));
}

// Whether the process that wrote `dir`/owner still runs. A directory without an owner file
// is being set up by someone right now unless it is older than a minute.
bool owner_alive(const std::string& dir) {
  std::istringstream owner(slurp(dir + "/owner"));
  long pid = 0;
  uint64_t start = 0;
  if (!(owner >> pid >> start)) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) return false;
    return ::time(nullptr) - st.st_mtime < 60;
  }
  return process_alive(static_cast<pid_t>(pid)) &&
         process_start_time(static_cast<pid_t>(pid)) == start;
}

// SIGKILLs every process `find` returns, in its order, and again for ones forked meanwhile
// (a few rounds). No SIGSTOP first: stopping a process group and then killing its parent
// makes the kernel send SIGHUP + SIGCONT to the orphaned group, which a test would see.
void kill_all(const std::function<std::vector<pid_t>()>& find) {
  std::set<pid_t> seen;
  for (int round = 0; round < 5; ++round) {
    bool more = false;
    for (pid_t p : find()) {
      ::kill(p, SIGKILL);
      more |= seen.insert(p).second;
    }
    if (!more) break;
  }
  for (pid_t p : seen) wait_exit(p, 2s);
}

// Slurm's and munge's daemons by their command name: only these are matched by the files
// they hold open (a person's `tail -f` of a log is left alone).
bool is_daemon(pid_t pid) {
  // Exact names: a test binary's comm ("slurm_timelimit", 15 bytes of its name) starts with
  // "slurm" too, and a concurrent test's clean-up of a stale cluster killed one.
  const std::string comm = process_comm(pid);
  return comm == "slurmctld" || comm == "slurmd" || comm == "slurmstepd" || comm == "slurmdbd" ||
         comm == "munged";
}

std::vector<pid_t> daemons_holding(const std::string& path) {
  auto pids = pids_with_open_file(path);
  pids.erase(std::remove_if(pids.begin(), pids.end(), [](pid_t p) { return !is_daemon(p); }),
             pids.end());
  return pids;
}

// Every process of the cluster in `dir`: the daemons holding a file below it open (slurmctld,
// slurmd, slurmstepd by its node's log, munged by its log), then those whose environment
// names the directory or the cluster (the jobs' processes).
std::vector<pid_t> fixture_pids(const std::string& dir, const std::string& cluster) {
  std::vector<pid_t> pids = daemons_holding(dir);
  const std::string marker = std::string(kMarker) + "=" + dir;
  const std::string name = "SLURM_CLUSTER_NAME=" + cluster;
  for (pid_t p : pids_where([&](pid_t, const std::vector<std::string>& env) {
         return std::find(env.begin(), env.end(), marker) != env.end() ||
                (!cluster.empty() && std::find(env.begin(), env.end(), name) != env.end());
       }))
    if (std::find(pids.begin(), pids.end(), p) == pids.end()) pids.push_back(p);
  return pids;
}

std::atomic<int> g_cluster_seq{0};

}  // namespace

std::optional<std::string> SlurmCluster::unavailable_reason() {
  if (::geteuid() != 0) return "the Slurm fixture needs root (it starts munged, slurmctld, slurmd)";
  for (const char* p : {"slurmctld", "slurmd", "slurmstepd", "sbatch", "srun", "scontrol", "squeue",
                        "scancel", "munged", "mungekey", "runuser"}) {
    if (!find_program(p))
      return std::string("the Slurm fixture needs '") + p +
             "' (Debian slurm-wlm and munge: scripts/setup --test installs them)";
  }
  if (::getpwnam("munge") == nullptr) return "the Slurm fixture needs the 'munge' user";
  return std::nullopt;
}

void SlurmCluster::sweep_stale() {
  // Clusters whose owner died: their directories, and the directories named by processes
  // (the directory may be gone already).
  std::set<std::string> stale_dirs;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(tmp_base(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kDirPrefix, 0) == 0 && entry.is_directory(ec) && !owner_alive(entry.path()))
      stale_dirs.insert(entry.path().string());
  }
  (void)pids_where([&](pid_t, const std::vector<std::string>& env) {
    auto dir = env_value(env, kMarker);
    if (dir && std::filesystem::path(*dir).filename().string().rfind(kDirPrefix, 0) == 0 &&
        !owner_alive(*dir))
      stale_dirs.insert(*dir);
    return false;
  });
  for (const auto& dir : stale_dirs) {
    std::string cluster;
    std::istringstream conf(slurp(dir + "/slurm.conf"));
    for (std::string line; std::getline(conf, line);)
      if (line.rfind("ClusterName=", 0) == 0) cluster = line.substr(12);
    kill_all([&] { return fixture_pids(dir, cluster); });
    if (std::getenv("SHARDGUARD_KEEP_TEST_DIRS") == nullptr) std::filesystem::remove_all(dir, ec);
  }
}

Result<std::unique_ptr<SlurmCluster>> SlurmCluster::start(SlurmOptions options) {
  if (auto why = unavailable_reason()) return Error(ErrorCode::kUnsupported, *why);
  if (options.nodes < 1 || options.nodes > 16)
    return Error(ErrorCode::kInvalid, "SlurmOptions.nodes must be 1..16");
  sweep_stale();
  std::optional<Error> last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::unique_ptr<SlurmCluster> c(new SlurmCluster);
    c->options_ = options;
    std::string tmpl = tmp_base() + "/" + kDirPrefix + "XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr)
      return Error::from_errno("mkdtemp '" + tmpl + "'", errno);
    c->dir_ = tmpl;
    c->conf_path_ = c->dir_ + "/slurm.conf";
    c->cluster_name_ = "sg" + std::to_string(::getpid()) + "x" + std::to_string(g_cluster_seq++);
    Status s = write_text(c->dir_ + "/owner", self_identity() + "\n");
    // munged (running as munge) must reach its socket below this directory.
    if (s.ok() && ::chmod(c->dir_.c_str(), 0711) != 0)
      s = Error::from_errno("chmod '" + c->dir_ + "'", errno);
    std::vector<std::string> subdirs = {"state", "log", "jobs"};
    for (const auto& n : c->node_names()) subdirs.push_back("spool-" + n);
    for (const auto& sub : subdirs)
      if (s.ok()) std::filesystem::create_directories(c->dir_ + "/" + sub);
    if (s.ok()) s = c->start_munge();
    if (s.ok()) s = c->write_conf();
    if (s.ok()) s = c->start_ctld();
    for (const auto& n : c->node_names())
      if (s.ok()) s = c->start_slurmd(n);
    if (s.ok()) s = c->wait_all_idle(options.start_timeout);
    if (s.ok()) return c;
    // A port handed out by free_tcp_port() may be taken by someone else before the daemon
    // binds it: then, and only then, try again with new ports.
    bool port_taken = false;
    for (const char* log : {"slurmctld.log", "slurmctld.out"})
      port_taken |=
          slurp(c->dir_ + "/log/" + log).find("Address already in use") != std::string::npos;
    for (const auto& n : c->node_names())
      port_taken |=
          slurp(c->dir_ + "/log/slurmd-" + n + ".log").find("Address already in use") !=
          std::string::npos;
    last = std::move(s).error().context("start Slurm cluster in '" + c->dir_ + "'");
    c->stop();
    if (!port_taken) break;
  }
  return *last;
}

SlurmCluster::~SlurmCluster() { stop(); }

std::vector<std::string> SlurmCluster::node_names() const {
  std::vector<std::string> names;
  for (int i = 1; i <= options_.nodes; ++i) names.push_back("n" + std::to_string(i));
  return names;
}

std::vector<std::string> SlurmCluster::env() const {
  return {"SLURM_CONF=" + conf_path_, std::string(kMarker) + "=" + dir_};
}

std::vector<std::string> SlurmCluster::child_env() const {
  // SLURM_* of a surrounding allocation (a test run inside a Slurm job) would make srun and
  // sbatch act inside it: dropped ("SLURM_*", see run_process), but for our SLURM_CONF.
  std::vector<std::string> e = {"SLURM_*"};
  for (auto& x : env()) e.push_back(std::move(x));
  return e;
}

std::string SlurmCluster::shell_env() const {
  return "SLURM_CONF='" + conf_path_ + "' " + kMarker + "='" + dir_ + "' ";
}

Status SlurmCluster::start_munge() {
  const std::string d = dir_ + "/munge";
  munge_socket_ = d + "/munge.sock";
  if (::mkdir(d.c_str(), 0711) != 0) return Error::from_errno("mkdir '" + d + "'", errno);
  const passwd* pw = ::getpwnam("munge");
  if (pw == nullptr) return Error(ErrorCode::kNotFound, "user 'munge' does not exist");
  if (::chown(d.c_str(), pw->pw_uid, pw->pw_gid) != 0)
    return Error::from_errno("chown '" + d + "'", errno);
  // Our own key: no dependency on (or change to) the machine's /etc/munge.
  auto key = run_process(
      {"runuser", "-u", "munge", "--", "mungekey", "--create", "--keyfile=" + d + "/munge.key"},
      child_env(), 15s);
  if (!key.ok()) return key.error();
  if (key->exit_code != 0) return Error(ErrorCode::kIo, "mungekey --create failed: " + key->err);
  // munged daemonizes once its socket is ready: runuser returns then.
  auto pid = spawn_process({"runuser", "-u", "munge", "--", "munged", "--socket=" + munge_socket_,
                            "--key-file=" + d + "/munge.key", "--pid-file=" + d + "/munged.pid",
                            "--log-file=" + d + "/munged.log", "--seed-file=" + d + "/munged.seed"},
                           child_env(), dir_ + "/log/munged.out", 0);
  if (!pid.ok()) return pid.error();
  auto code = wait_child(*pid, 20s);
  if (!code) {
    stop_process(*pid, 1s);
    return Error(ErrorCode::kTimeout,
                 "munged did not start within 20 s: " + slurp(dir_ + "/log/munged.out"));
  }
  if (*code != 0)
    return Error(ErrorCode::kIo, "munged exited " + std::to_string(*code) + ": " +
                                     slurp(dir_ + "/log/munged.out"));
  munged_pid_ = static_cast<pid_t>(std::atol(slurp(d + "/munged.pid").c_str()));
  if (munged_pid_ <= 0) return Error(ErrorCode::kIo, "munged wrote no pid file in '" + d + "'");
  return ok_status();
}

Status SlurmCluster::write_conf() {
  auto port = free_tcp_port();
  if (!port.ok()) return port.error();
  ctld_port_ = *port;
  std::set<int> used{ctld_port_};
  while (static_cast<int>(node_ports_.size()) < options_.nodes) {
    auto p = free_tcp_port();
    if (!p.ok()) return p.error();
    if (used.insert(*p).second) node_ports_.push_back(*p);
  }
  SlurmConfSpec spec{options_, dir_, cluster_name_, munge_socket_, ctld_port_, node_ports_};
  if (options_.gpus_per_node > 0) {
    // gres.conf beside slurm.conf (where slurmd looks), and the devices it names: slurmd
    // refuses a file that is no character or block device ("fix your gres.conf"), so each is a
    // link to /dev/null; the index Slurm hands out is the number in the name.
    for (const auto& n : node_names()) {
      std::error_code ec;
      std::filesystem::create_directories(dir_ + "/gpus/" + n, ec);
      for (int i = 0; i < options_.gpus_per_node && !ec; ++i)
        std::filesystem::create_symlink("/dev/null",
                                        dir_ + "/gpus/" + n + "/nvidia" + std::to_string(i), ec);
      if (ec)
        return Error(ErrorCode::kIo, "GPU device links in '" + dir_ + "/gpus': " + ec.message());
    }
    SG_RETURN_IF_ERROR(write_text(dir_ + "/gres.conf", render_gres_conf(spec)));
  }
  return write_text(conf_path_, render_slurm_conf(spec));
}

Status SlurmCluster::start_ctld() {
  auto pid = spawn_process({"slurmctld", "-D", "-f", conf_path_}, child_env(),
                           dir_ + "/log/slurmctld.out", SIGTERM);
  if (!pid.ok()) return pid.error();
  ctld_pid_ = *pid;
  const auto deadline = Clock::now() + options_.start_timeout;
  while (Clock::now() < deadline) {
    if (!process_alive(ctld_pid_))
      return Error(ErrorCode::kIo, "slurmctld exited at start: " +
                                       tail(slurp(dir_ + "/log/slurmctld.out"), 2000));
    auto ping = run({"scontrol", "ping"}, 10s);
    if (ping.ok() && ping->out.find("is UP") != std::string::npos) return ok_status();
    std::this_thread::sleep_for(200ms);
  }
  return Error(ErrorCode::kTimeout,
               "slurmctld did not answer `scontrol ping` in time: " + ctld_log_tail(2000));
}

Status SlurmCluster::start_slurmd(const std::string& name) {
  auto pid = spawn_process({"slurmd", "-D", "-N", name, "-f", conf_path_}, child_env(),
                           dir_ + "/log/slurmd-" + name + ".out", SIGTERM);
  if (!pid.ok()) return pid.error();
  slurmd_pids_[name] = *pid;
  return ok_status();
}

Status SlurmCluster::wait_all_idle(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string states;
  while (Clock::now() < deadline) {
    for (const auto& [name, pid] : slurmd_pids_)
      if (!process_alive(pid))
        return Error(ErrorCode::kIo,
                     "slurmd " + name + " exited at start: " +
                         tail(slurp(dir_ + "/log/slurmd-" + name + ".out"), 2000));
    bool all_idle = true;
    states.clear();
    for (const auto& n : node_names()) {
      auto s = node_state(n);
      const std::string st = s.ok() ? *s : "?";
      states += n + "=" + st + " ";
      all_idle &= st == "IDLE";
    }
    if (all_idle) return ok_status();
    std::this_thread::sleep_for(200ms);
  }
  return Error(ErrorCode::kTimeout, "nodes not idle in time (" + states + ")");
}

void SlurmCluster::stop() {
  if (stopped_) return;
  stopped_ = true;
  // Nothing here is worth a graceful stop (the state directory goes away), and a slurmd with
  // steps left waits for them on SIGTERM: kill every process of the cluster, by pid.
  kill_all([&] {
    auto pids = fixture_pids(dir_, cluster_name_);
    for (pid_t p : {ctld_pid_, munged_pid_})
      if (p > 0 && process_alive(p)) pids.push_back(p);
    for (const auto& [name, p] : slurmd_pids_)
      if (process_alive(p)) pids.push_back(p);
    return pids;
  });
  // Reap our own children (spawned daemons), whatever kill_all saw of them.
  for (const auto& [name, p] : slurmd_pids_) wait_exit(p, 2s);
  if (ctld_pid_ > 0) wait_exit(ctld_pid_, 2s);
  if (std::getenv("SHARDGUARD_KEEP_TEST_DIRS") == nullptr && !dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

Status SlurmCluster::kill_node(const std::string& name) {
  auto it = slurmd_pids_.find(name);
  if (it == slurmd_pids_.end())
    return Error(ErrorCode::kNotFound, "no slurmd of node '" + name + "' is running");
  const pid_t slurmd = it->second;
  const std::string node_log = dir_ + "/log/slurmd-" + name + ".log";
  const std::string cluster = "SLURM_CLUSTER_NAME=" + cluster_name_;
  const std::string on_node = "SLURMD_NODENAME=" + name;
  kill_all([&] {
    // slurmd and its slurmstepd (they hold the node's log open) first, so that no one is
    // left to report the deaths of the jobs' processes placed on the node, killed next.
    auto pids = daemons_holding(node_log);
    for (pid_t p : pids_where([&](pid_t, const std::vector<std::string>& env) {
           return std::find(env.begin(), env.end(), cluster) != env.end() &&
                  std::find(env.begin(), env.end(), on_node) != env.end();
         }))
      pids.push_back(p);
    if (process_alive(slurmd)) pids.push_back(slurmd);
    return pids;
  });
  wait_exit(slurmd, 5s);
  slurmd_pids_.erase(it);
  return ok_status();
}

Status SlurmCluster::restart_node(const std::string& name) {
  if (slurmd_pids_.count(name) != 0)
    return Error(ErrorCode::kInvalid, "slurmd of node '" + name + "' is still running");
  return start_slurmd(name);
}

std::string SlurmCluster::ctld_log_tail(size_t bytes) const {
  return tail(slurp(dir_ + "/log/slurmctld.log"), bytes);
}

}  // namespace shardguard::testing
