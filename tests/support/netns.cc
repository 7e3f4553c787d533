// NetnsNetwork: creating, partitioning and tearing down the namespaces (see netns.h).
#include "tests/support/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <set>
#include <sstream>

namespace shardguard::testing {
namespace {

using namespace std::chrono_literals;

std::atomic<int> g_network_seq{0};

Result<ProcResult> run_ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, {}, 20s);
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

// "sgnet-<pid>-<starttime>-..." -> whether that process still runs.
bool owner_alive(const std::string& ns) {
  std::istringstream in(ns.substr(std::char_traits<char>::length(NetnsNetwork::kPrefix)));
  long pid = 0;
  unsigned long long start = 0;
  char dash1 = 0, dash2 = 0;
  if (!(in >> pid >> dash1 >> start >> dash2) || dash1 != '-' || dash2 != '-') return false;
  return process_alive(static_cast<pid_t>(pid)) &&
         process_start_time(static_cast<pid_t>(pid)) == start;
}

std::vector<pid_t> pids_of_namespace(const std::string& ns) {
  std::vector<pid_t> pids;
  auto r = run_ip({"netns", "pids", ns});
  if (!r.ok()) return pids;
  std::istringstream in(r->out);
  for (long p; in >> p;) pids.push_back(static_cast<pid_t>(p));
  return pids;
}

// Kills what runs in `ns` (a few rounds: processes may fork meanwhile), then deletes it.
void kill_and_delete(const std::string& ns) {
  for (int round = 0; round < 5; ++round) {
    auto pids = pids_of_namespace(ns);
    if (pids.empty()) break;
    for (pid_t p : pids) ::kill(p, SIGKILL);
    for (pid_t p : pids) wait_exit(p, 2s);
  }
  (void)run_ip({"netns", "delete", ns});
}

}  // namespace

std::optional<std::string> NetnsNetwork::unavailable_reason() {
  if (::geteuid() != 0) return "network namespaces need root";
  for (const char* p : {"ip", "iptables"})
    if (!find_program(p))
      return std::string("the netns fixture needs '") + p +
             "' (Debian iproute2 and iptables: scripts/setup --test installs them)";
  const std::string probe = std::string(kPrefix) + std::to_string(::getpid()) + "-" +
                            std::to_string(process_start_time(::getpid()).value_or(0)) + "-probe";
  auto add = run_ip({"netns", "add", probe});
  if (!add.ok() || add->exit_code != 0)
    return "creating a network namespace is not permitted here: " +
           (add.ok() ? add->err : add.error().message());
  auto drop = run_process({"ip", "netns", "exec", probe, "iptables", "-w", "-S"}, {}, 20s);
  (void)run_ip({"netns", "delete", probe});
  if (!drop.ok() || drop->exit_code != 0)
    return "iptables does not work inside a network namespace here: " +
           (drop.ok() ? drop->err : drop.error().message());
  return std::nullopt;
}

std::vector<std::string> NetnsNetwork::existing_namespaces() {
  std::vector<std::string> names;
  auto r = run_ip({"netns", "list"});
  if (!r.ok()) return names;
  std::istringstream in(r->out);
  for (std::string line; std::getline(in, line);) {
    const std::string name = line.substr(0, line.find(' '));  // "name (id: 3)"
    if (name.rfind(kPrefix, 0) == 0) names.push_back(name);
  }
  return names;
}

void NetnsNetwork::sweep_stale() {
  for (const auto& ns : existing_namespaces())
    if (!owner_alive(ns)) kill_and_delete(ns);
}

Result<std::unique_ptr<NetnsNetwork>> NetnsNetwork::create(NetnsOptions options) {
  if (auto why = unavailable_reason()) return Error(ErrorCode::kUnsupported, *why);
  if (options.nodes < 1 || options.nodes > 250)
    return Error(ErrorCode::kInvalid, "NetnsOptions.nodes must be 1..250");
  sweep_stale();
  std::unique_ptr<NetnsNetwork> n(new NetnsNetwork);
  n->options_ = options;
  const pid_t self = ::getpid();
  n->base_ = std::string(kPrefix) + std::to_string(self) + "-" +
             std::to_string(process_start_time(self).value_or(0)) + "-" +
             std::to_string(g_network_seq++) + "-";
  n->hub_ = n->base_ + "hub";
  for (int i = 0; i < options.nodes; ++i) n->nodes_.push_back(n->base_ + "n" + std::to_string(i));
  n->cut_.assign(n->nodes_.size(), std::nullopt);
  Status s = n->build();
  if (!s.ok()) {
    n->destroy();
    return std::move(s).error().context("create network namespaces " + n->base_ + "*");
  }
  return n;
}

Status NetnsNetwork::ip(const std::vector<std::string>& args) const {
  auto r = run_ip(args);
  if (!r.ok()) return r.error();
  if (r->exit_code != 0) return Error(ErrorCode::kIo, "ip " + joined(args) + ": " + r->err);
  return ok_status();
}

Status NetnsNetwork::build() {
  SG_RETURN_IF_ERROR(ip({"netns", "add", hub_}));
  SG_RETURN_IF_ERROR(ip({"-n", hub_, "link", "set", "lo", "up"}));
  SG_RETURN_IF_ERROR(ip({"-n", hub_, "link", "add", "br0", "type", "bridge"}));
  SG_RETURN_IF_ERROR(ip({"-n", hub_, "link", "set", "br0", "up"}));
  for (int i = 0; i < size(); ++i) {
    const std::string& ns = nodes_[static_cast<size_t>(i)];
    const std::string port = "v" + std::to_string(i);
    SG_RETURN_IF_ERROR(ip({"netns", "add", ns}));
    // Both ends made inside namespaces: no interface ever appears in the root namespace.
    SG_RETURN_IF_ERROR(
        ip({"-n", hub_, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns}));
    SG_RETURN_IF_ERROR(ip({"-n", hub_, "link", "set", port, "master", "br0"}));
    SG_RETURN_IF_ERROR(ip({"-n", hub_, "link", "set", port, "up"}));
    SG_RETURN_IF_ERROR(ip({"-n", ns, "link", "set", "lo", "up"}));
    SG_RETURN_IF_ERROR(ip({"-n", ns, "addr", "add", address(i) + "/24", "dev", "eth0"}));
    SG_RETURN_IF_ERROR(ip({"-n", ns, "link", "set", "eth0", "up"}));
  }
  return ok_status();
}

NetnsNetwork::~NetnsNetwork() { destroy(); }

void NetnsNetwork::destroy() {
  if (destroyed_) return;
  destroyed_ = true;
  for (pid_t p : spawned_) ::kill(-p, SIGKILL);  // `ip netns exec` and its process group
  for (pid_t p : spawned_) wait_exit(p, 2s);
  for (const auto& ns : nodes_) kill_and_delete(ns);
  if (!hub_.empty()) kill_and_delete(hub_);
}

std::string NetnsNetwork::address(int i) const {
  return "10." + std::to_string(options_.octet2) + "." + std::to_string(options_.octet3) + "." +
         std::to_string(i + 1);
}

std::vector<std::string> NetnsNetwork::exec_argv(int i,
                                                 const std::vector<std::string>& argv) const {
  std::vector<std::string> full = {"ip", "netns", "exec", name(i)};
  full.insert(full.end(), argv.begin(), argv.end());
  return full;
}

Result<ProcResult> NetnsNetwork::exec(int i, const std::vector<std::string>& argv,
                                      std::chrono::milliseconds timeout) const {
  return run_process(exec_argv(i, argv), {}, timeout);
}

Result<pid_t> NetnsNetwork::spawn(int i, const std::vector<std::string>& argv,
                                  const std::string& log_path,
                                  const std::vector<std::string>& env_extra) {
  auto pid = spawn_process(exec_argv(i, argv), env_extra, log_path, SIGKILL);
  if (pid.ok()) spawned_.push_back(*pid);
  return pid;
}

NetnsEntered::~NetnsEntered() {
  if (::setns(original_fd_, CLONE_NEWNET) != 0) std::abort();  // a thread stuck elsewhere
  ::close(original_fd_);
}

Result<std::unique_ptr<NetnsEntered>> NetnsNetwork::enter(int i) const {
  const int original = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (original < 0) return Error::from_errno("open /proc/thread-self/ns/net", errno);
  const std::string path = "/run/netns/" + name(i);
  const int target = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (target < 0) {
    auto e = Error::from_errno("open " + path, errno);
    ::close(original);
    return e;
  }
  const int rc = ::setns(target, CLONE_NEWNET);
  const int err = errno;
  ::close(target);
  if (rc != 0) {
    ::close(original);
    return Error::from_errno("setns into " + name(i), err);
  }
  return std::make_unique<NetnsEntered>(original);
}

Status NetnsNetwork::iptables(int i, const std::string& op) const {
  for (const auto& rule : std::vector<std::vector<std::string>>{
           {"INPUT", "-i", "eth0", "-j", "DROP"}, {"OUTPUT", "-o", "eth0", "-j", "DROP"}}) {
    std::vector<std::string> argv = {"iptables", "-w", op};
    argv.insert(argv.end(), rule.begin(), rule.end());
    auto r = exec(i, argv, 20s);
    if (!r.ok()) return r.error();
    if (r->exit_code != 0)
      return Error(ErrorCode::kIo, "in " + name(i) + ": " + joined(argv) + ": " + r->err);
  }
  return ok_status();
}

Status NetnsNetwork::partition(int i, PartitionMethod method) {
  if (i < 0 || i >= size()) return Error(ErrorCode::kInvalid, "no node " + std::to_string(i));
  auto& cut = cut_[static_cast<size_t>(i)];
  if (cut) return Error(ErrorCode::kInvalid, name(i) + " is already partitioned");
  if (method == PartitionMethod::kIptablesDrop) {
    SG_RETURN_IF_ERROR(iptables(i, "-I"));
  } else {
    SG_RETURN_IF_ERROR(ip({"-n", hub_, "link", "set", "v" + std::to_string(i), "down"}));
  }
  cut = method;
  return ok_status();
}

Status NetnsNetwork::heal(int i) {
  if (i < 0 || i >= size()) return Error(ErrorCode::kInvalid, "no node " + std::to_string(i));
  auto& cut = cut_[static_cast<size_t>(i)];
  if (!cut) return Error(ErrorCode::kInvalid, name(i) + " is not partitioned");
  if (*cut == PartitionMethod::kIptablesDrop) {
    SG_RETURN_IF_ERROR(iptables(i, "-D"));
  } else {
    SG_RETURN_IF_ERROR(ip({"-n", hub_, "link", "set", "v" + std::to_string(i), "up"}));
  }
  cut.reset();
  return ok_status();
}

bool NetnsNetwork::partitioned(int i) const {
  return i >= 0 && i < size() && cut_[static_cast<size_t>(i)].has_value();
}

std::vector<pid_t> NetnsNetwork::pids_in(int i) const { return pids_of_namespace(name(i)); }

}  // namespace shardguard::testing
