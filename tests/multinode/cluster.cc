// Catch2's listener interface, for the failure counter below.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include "tests/multinode/cluster.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "tests/support/command.h"

namespace shardguard::testing::multinode {
namespace {

using namespace std::chrono_literals;

// Failed assertions so far in this test binary, so that a cluster knows whether to show the
// nodes' logs when it goes away.
std::atomic<uint64_t> g_failed{0};

struct FailureCounter : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  bool assertionEnded(Catch::AssertionStats const& stats) override {
    if (!stats.assertionResult.isOk()) ++g_failed;
    return true;
  }
};

bool can_bind(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_ANY);  // taken on any address means taken here
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// Parent pid of every process now (field 4 of /proc/PID/stat, after the command in parens).
std::map<pid_t, pid_t> parents() {
  std::map<pid_t, pid_t> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream in("/proc/" + std::string(e->d_name) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    if (rest >> state >> ppid) out[pid] = ppid;
  }
  ::closedir(d);
  return out;
}

// SIGKILL to every process of the tree at once, then reaps its root; no test assertions, so
// that the destructor can call it while a failed assertion unwinds.
std::vector<pid_t> kill_tree(Background& root) {
  if (root.pid() <= 0) return {};  // never started: kill(-1) would signal every process
  const std::vector<pid_t> tree = process_tree(root.pid());
  for (pid_t p : tree) ::kill(p, SIGKILL);
  for (pid_t p : tree) ::kill(p, SIGCONT);  // a stopped process dies once it runs again
  root.wait(10s);
  return tree;
}

std::string tail(const std::string& text, size_t bytes) {
  return text.size() <= bytes ? text : "..." + text.substr(text.size() - bytes);
}

}  // namespace

CATCH_REGISTER_LISTENER(FailureCounter)

uint16_t free_port_block(int count) {
  std::mt19937 rng(
      static_cast<uint32_t>(::getpid()) ^
      static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::uniform_int_distribution<int> pick(20000, 32000 - count);
  for (int tries = 0; tries < 200; ++tries) {
    const auto base = static_cast<uint16_t>(pick(rng));
    bool all = true;
    for (int i = 0; i < count && all; ++i) all = can_bind(static_cast<uint16_t>(base + i));
    if (all) return base;
  }
  FAIL("no block of " << count << " free ports found in 200 tries");
  return 0;
}

std::vector<pid_t> process_tree(pid_t pid) {
  if (pid <= 0) return {};  // not a process: 0 and -1 mean groups to kill(2)
  const auto parent = parents();
  std::vector<pid_t> out = {pid};
  for (size_t i = 0; i < out.size(); ++i)
    for (const auto& [child, ppid] : parent)
      if (ppid == out[i] && std::find(out.begin(), out.end(), child) == out.end())
        out.push_back(child);
  return out;
}

std::string trainer_path() {
  const char* b = std::getenv("SG_TRAINER_BIN");
  return b ? b : "sg_trainer";
}

Cluster::Cluster(ClusterOptions options) : options_(std::move(options)) {
  ckpt_ = options_.checkpoint_dir.empty() ? tmp_ / "ckpt" : options_.checkpoint_dir;
  secret_ = tmp_ / "secret";
  config_ = tmp_ / "job.toml";
  dump_dir_ = tmp_ / "resume-dumps";
  ::mkdir(dump_dir_.c_str(), 0755);
  job_id_ = "mn-" + std::to_string(::getpid()) + "-" +
            std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1000000);
  rdzv_port_ = free_port_block(1);
  master_port_ = free_port_block(12);
  const auto made = run_command(shardguard_bin() + " secret generate " + secret_);
  REQUIRE(made.exit_code == 0);
  // Fast restarts, every checkpoint kept (the tests read the history), a short term grace so
  // ranks stuck in the collective are killed quickly after `stop`.
  std::ofstream(config_) << "[job]\ncheckpoint_dir = \"" << ckpt_ << "\"\n"
                         << "master_port = " << master_port_ << "\n"
                         << options_.job_config
                         << "[restart]\nbackoff_initial = \"10ms\"\nbackoff_max = \"50ms\"\n"
                         << "[stop]\ngrace = \"20s\"\nterm_grace = \"2s\"\n"
                         << "[checkpoint]\nevery_steps = " << options_.every_steps << "\n"
                         << "keep_last = 0\n"
                         << options_.extra_config;
  nodes_.resize(static_cast<size_t>(options_.nodes));
  stopped_.resize(static_cast<size_t>(options_.nodes));
  endpoint_.resize(static_cast<size_t>(options_.nodes));
  failures_at_start_ = g_failed.load();
}

Cluster::~Cluster() {
  for (auto& s : stopped_)
    for (pid_t p : s) ::kill(p, SIGCONT);
  for (auto& node : nodes_)
    if (node && !node->wait(1ms)) kill_tree(*node);
  if (g_failed.load() != failures_at_start_) {
    std::printf("%s", logs().c_str());
    std::fflush(stdout);
  }
}

std::string Cluster::address(int k) const {
  return options_.address ? options_.address(k) : "127.0.0." + std::to_string(k + 2);
}

std::string Cluster::run_dir(int k) const { return tmp_ / ("run-" + std::to_string(k)); }

void Cluster::set_endpoint(int k, const std::string& host_port) {
  endpoint_.at(static_cast<size_t>(k)) = host_port;
}

std::vector<std::string> Cluster::node_argv(int k, const std::string& secret) const {
  const std::string host = options_.rdzv_host.empty() ? "127.0.0.1" : options_.rdzv_host;
  const std::string& via = endpoint_.at(static_cast<size_t>(k));
  std::vector<std::string> argv = {
      shardguard_bin(),   "run",
      "--config",         config_,
      "--nnodes",         options_.nnodes,
      "--rdzv-endpoint",  via.empty() ? host + ":" + std::to_string(rdzv_port_) : via,
      "--node-rank",      std::to_string(k),
      "--nproc-per-node", std::to_string(options_.nproc_per_node),
      "--node-address",   address(k),
      "--secret-file",    secret.empty() ? secret_ : secret,
      "--run-dir",        run_dir(k),
      "--job-id",         job_id_};
  if (!options_.join_window.empty()) {
    argv.push_back("--join-window");
    argv.push_back(options_.join_window);
  }
  argv.insert(argv.end(), {"--", trainer_path(), "--dump-resume", dump_dir_});
  argv.insert(argv.end(), options_.trainer_args.begin(), options_.trainer_args.end());
  return options_.wrap ? options_.wrap(k, std::move(argv)) : argv;
}

void Cluster::start(int k) {
  auto& slot = nodes_.at(static_cast<size_t>(k));
  REQUIRE((!slot || slot->wait(1ms).has_value()));  // never two of one node
  slot = std::make_unique<Background>(node_argv(k), tmp_ / ("node-" + std::to_string(k) + ".log"));
  REQUIRE(slot->pid() > 0);
}

void Cluster::start_all() {
  for (int k = 0; k < options_.nodes; ++k) start(k);
}

int Cluster::wait(int k, std::chrono::milliseconds timeout) {
  auto& slot = nodes_.at(static_cast<size_t>(k));
  if (!slot) return -1;
  return slot->wait(timeout).value_or(-1);
}

bool Cluster::wait_all(int code, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  bool all = true;
  for (int k = 0; k < options_.nodes; ++k) {
    if (!nodes_[static_cast<size_t>(k)]) continue;
    const auto left = std::max(std::chrono::milliseconds(1),
                               std::chrono::duration_cast<std::chrono::milliseconds>(
                                   until - std::chrono::steady_clock::now()));
    const auto got = wait(k, left);
    UNSCOPED_INFO("node " << k << " exit: " << (got >= 0 ? std::to_string(got) : "still running"));
    all = all && got == code;
  }
  return all;
}

pid_t Cluster::pid(int k) const { return nodes_.at(static_cast<size_t>(k))->pid(); }

std::vector<pid_t> Cluster::kill_node(int k) {
  auto& slot = nodes_.at(static_cast<size_t>(k));
  REQUIRE(slot);
  const std::vector<pid_t> tree = kill_tree(*slot);
  stopped_[static_cast<size_t>(k)].clear();
  REQUIRE(slot->wait(1ms).has_value());
  return tree;
}

std::vector<pid_t> Cluster::stop_node(int k) {
  auto& slot = nodes_.at(static_cast<size_t>(k));
  REQUIRE(slot);
  // The supervisor first, so that it cannot react to its ranks stopping; then the ranks, and
  // again for any process born meanwhile.
  std::vector<pid_t> stopped;
  for (int round = 0; round < 3; ++round)
    for (pid_t p : process_tree(slot->pid()))
      if (std::find(stopped.begin(), stopped.end(), p) == stopped.end() && ::kill(p, SIGSTOP) == 0)
        stopped.push_back(p);
  stopped_[static_cast<size_t>(k)] = stopped;
  return stopped;
}

void Cluster::cont_node(int k) {
  for (pid_t p : stopped_.at(static_cast<size_t>(k))) ::kill(p, SIGCONT);
  stopped_[static_cast<size_t>(k)].clear();
}

std::vector<supervisor::EventRecord> Cluster::events() const { return node_events(0); }

std::vector<supervisor::EventRecord> Cluster::node_events(int k) const {
  auto e = supervisor::read_events(run_dir(k) + "/events.jsonl");
  return e.ok() ? *e : std::vector<supervisor::EventRecord>{};
}

std::string Cluster::log(int k) const {
  return slurp(tmp_ / ("node-" + std::to_string(k) + ".log"));
}

std::string Cluster::logs() const {
  std::string out;
  for (int k = 0; k < options_.nodes; ++k)
    out +=
        "---- node " + std::to_string(k) + " (" + tmp_.path() + ")\n" + tail(log(k), 6000) + "\n";
  return out;
}

}  // namespace shardguard::testing::multinode
