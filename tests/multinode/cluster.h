// A multi-node job as real processes for the multi-node tests: N `shardguard run --nnodes`
// processes (one per "node", each with its own run directory) over the example trainer, one
// shared checkpoint location (a directory, or a bucket), one secret. On loopback each node has
// its own address 127.0.0.<k+2> and the coordinator (node rank 0) listens on 127.0.0.1; a test
// that uses network namespaces passes the addresses and a wrapper that runs each node inside
// its namespace. A node can be started again after it died, SIGKILLed whole (its supervisor
// and every descendant), or frozen and thawed whole (SIGSTOP/SIGCONT), as a VM would be.
//
// When an assertion fails while a cluster exists, the tail of every node's log is printed as
// the cluster goes away (what the nodes said up to the end).
//
// Each cluster takes its own ports (the rendezvous endpoint and a block for MASTER_PORT,
// which is [job] master_port + epoch % 100) and its own job id, so tests can run in
// parallel. Everything still running is SIGKILLed when the cluster goes out of scope.
//
// Thread-safety: one test thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/event_log.h"
#include "tests/support/background.h"
#include "tests/support/temp_dir.h"

namespace shardguard::testing::multinode {

// A base port such that base .. base+count-1 can all be bound on every loopback address now,
// picked at random below the ephemeral range (so outgoing connections do not take them).
uint16_t free_port_block(int count);

// `pid` and every process below it (children first found through /proc/*/stat).
std::vector<pid_t> process_tree(pid_t pid);

// The paths of the binaries under test (CTest sets them).
std::string trainer_path();

struct ClusterOptions {
  int nodes = 3;             // node processes (node ranks 0..nodes-1)
  std::string nnodes = "3";  // --nnodes: "N" or "MIN:MAX"
  uint32_t nproc_per_node = 1;
  std::vector<std::string> trainer_args;
  std::string join_window = "20s";  // the first launch waits for every node (up to MAX)
  int every_steps = 50;
  std::string extra_config;  // appended to the job's TOML
  // [job] checkpoint_dir; empty: a directory below the cluster's temp dir (ckpt()).
  std::string checkpoint_dir;
  std::string job_config;    // lines added to its [job] table (e.g. coordinator_timeout)
  // Network namespaces: where node k's ranks are reached, where the coordinator listens, and
  // how node k's argv is run (e.g. {"ip", "netns", "exec", ns, argv...}). Empty: loopback.
  std::function<std::string(int node)> address;
  std::string rdzv_host;
  std::function<std::vector<std::string>(int node, std::vector<std::string> argv)> wrap;
};

class Cluster {
 public:
  explicit Cluster(ClusterOptions options);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // Starts node k (again, if it ran before: its log is appended to, its run dir kept).
  void start(int k);
  void start_all();
  // Node k connects to `host_port` instead of the coordinator (a proxy on the path).
  void set_endpoint(int k, const std::string& host_port);
  // Node k's `shardguard run` argv; `secret` overrides the secret file (a wrong one).
  std::vector<std::string> node_argv(int k, const std::string& secret = "") const;
  // The exit code of node k (128+signal when killed), or -1 while it runs at the timeout.
  int wait(int k, std::chrono::milliseconds timeout);
  // Waits for every node that runs; true when all exited with `code` within `timeout`.
  bool wait_all(int code, std::chrono::milliseconds timeout);
  pid_t pid(int k) const;

  // SIGKILL to node k's supervisor and every process below it, at once (a machine lost);
  // reaps the supervisor. Returns the pids killed.
  std::vector<pid_t> kill_node(int k);
  // SIGSTOP to node k's supervisor and every process below it (a frozen VM); cont_node
  // thaws exactly those processes. Returns the pids stopped.
  std::vector<pid_t> stop_node(int k);
  void cont_node(int k);

  // The coordinator's timeline (node 0's events.jsonl), read now.
  std::vector<supervisor::EventRecord> events() const;
  std::vector<supervisor::EventRecord> node_events(int k) const;
  std::string log(int k) const;
  // Every node's log, for INFO on failure (the tail of each).
  std::string logs() const;

  const std::string& ckpt() const { return ckpt_; }
  const std::string& config() const { return config_; }
  std::string run_dir(int k) const;
  const std::string& secret() const { return secret_; }
  const std::string& job_id() const { return job_id_; }
  // Where the trainer writes what it loaded on resume (--dump-resume, always passed).
  const std::string& dump_dir() const { return dump_dir_; }
  uint16_t rdzv_port() const { return rdzv_port_; }
  uint16_t master_port() const { return master_port_; }
  std::string address(int k) const;
  const TempDir& tmp() const { return tmp_; }
  const ClusterOptions& options() const { return options_; }

 private:
  ClusterOptions options_;
  TempDir tmp_;
  std::string ckpt_, secret_, config_, dump_dir_, job_id_;
  uint16_t rdzv_port_ = 0, master_port_ = 0;
  std::vector<std::unique_ptr<Background>> nodes_;
  std::vector<std::vector<pid_t>> stopped_;
  std::vector<std::string> endpoint_;  // per node; empty: the coordinator's
  uint64_t failures_at_start_ = 0;
};

}  // namespace shardguard::testing::multinode
