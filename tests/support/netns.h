// NetnsNetwork: N Linux network namespaces ("nodes") joined by veth pairs to a bridge that
// lives in a namespace of its own ("hub"), for multi-node tests over real TCP. Node i gets
// the address 10.<octet2>.<octet3>.<i+1>/24 on its eth0 and its own loopback. Nothing is
// created in, or routed through, the root namespace: the fixture never touches the
// machine's interfaces or firewall, and traffic reaches only the addresses it made.
//
// Partition a node (iptables DROP on its eth0 inside its namespace, or the hub's end of its
// veth set down; this kernel has no netem), heal it, run commands inside a node
// (`ip netns exec`). Teardown kills the processes left in the namespaces and deletes them
// (their veths and the bridge go with them), also after a failed test: the destructor does
// it, and create() first sweeps namespaces that dead runs left. Names are
// "sgnet-<pid>-<starttime>-<seq>-<role>", so the sweep knows the owner and never touches a
// live run's namespaces (parallel ctest, other engineers).
//
// The test's own code can also work inside a node for a while (NetnsNetwork::enter): a
// client built there reaches what listens inside, e.g. a storage node's S3 server.
//
// Thread-safety: one thread at a time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "tests/support/proc_tools.h"

namespace shardguard::testing {

struct NetnsOptions {
  int nodes = 2;
  // Addresses 10.<octet2>.<octet3>.<i+1>/24; the test chooses (private, used only inside).
  int octet2 = 213;
  int octet3 = 1;
};

// The calling thread in another network namespace until this goes away, then back in the one
// it came from: sockets it opens meanwhile, and threads it starts meanwhile (which keep that
// namespace for their lifetime: a libcurl transport's loop), belong to the namespace entered.
class NetnsEntered {
 public:
  explicit NetnsEntered(int original_fd) : original_fd_(original_fd) {}
  ~NetnsEntered();
  NetnsEntered(const NetnsEntered&) = delete;
  NetnsEntered& operator=(const NetnsEntered&) = delete;

 private:
  int original_fd_;
};

enum class PartitionMethod {
  kIptablesDrop,  // DROP in and out on the node's eth0: packets vanish, connects time out
  kLinkDown,      // the hub's end of the node's veth down: the node loses carrier
};

class NetnsNetwork {
 public:
  static constexpr const char* kPrefix = "sgnet-";

  // Why namespaces cannot be made here (not root, `ip` or `iptables` missing, not permitted),
  // or nullopt. Probes by creating and deleting one namespace.
  static std::optional<std::string> unavailable_reason();

  // Creates the hub and `options.nodes` namespaces, wired and up.
  static Result<std::unique_ptr<NetnsNetwork>> create(NetnsOptions options = {});

  // Deletes namespaces named with kPrefix whose owner process is gone (and kills what still
  // runs in them). create() calls it.
  static void sweep_stale();

  // Every namespace name with kPrefix that exists now (for tests of the teardown).
  static std::vector<std::string> existing_namespaces();

  ~NetnsNetwork();
  NetnsNetwork(const NetnsNetwork&) = delete;
  NetnsNetwork& operator=(const NetnsNetwork&) = delete;

  // Kills every process in the namespaces, deletes them; idempotent.
  void destroy();

  int size() const { return static_cast<int>(nodes_.size()); }
  const std::string& name(int i) const { return nodes_.at(static_cast<size_t>(i)); }
  const std::string& hub() const { return hub_; }
  std::string address(int i) const;  // "10.213.1.<i+1>"

  // {"ip", "netns", "exec", name(i), argv...}: for spawning with any helper.
  std::vector<std::string> exec_argv(int i, const std::vector<std::string>& argv) const;
  // Runs argv inside node i to its end (bounded by `timeout`).
  Result<ProcResult> exec(int i, const std::vector<std::string>& argv,
                          std::chrono::milliseconds timeout = std::chrono::seconds(30)) const;
  // Starts argv inside node i in the background (output appended to `log_path`); it is
  // killed by destroy() with everything else in the namespace.
  Result<pid_t> spawn(int i, const std::vector<std::string>& argv, const std::string& log_path,
                      const std::vector<std::string>& env_extra = {});

  // Cuts node i off from every other node; heal() undoes it. Partitioning twice is an error.
  Status partition(int i, PartitionMethod method = PartitionMethod::kIptablesDrop);
  Status heal(int i);
  bool partitioned(int i) const;

  // The calling thread enters node i's namespace (see NetnsEntered); build there what must
  // live there, and let it go before the guard.
  Result<std::unique_ptr<NetnsEntered>> enter(int i) const;

  // Pids of the processes in node i's namespace (`ip netns pids`).
  std::vector<pid_t> pids_in(int i) const;

 private:
  NetnsNetwork() = default;
  Status build();
  Status ip(const std::vector<std::string>& args) const;
  Status iptables(int i, const std::string& op) const;

  NetnsOptions options_;
  std::string base_;  // "sgnet-<pid>-<starttime>-<seq>-"
  std::string hub_;
  std::vector<std::string> nodes_;
  std::vector<std::optional<PartitionMethod>> cut_;
  std::vector<pid_t> spawned_;
  bool destroyed_ = false;
};

}  // namespace shardguard::testing
