// The coordinator's network side (DESIGN.md 6b): listens on the rendezvous endpoint for node
// supervisors over authenticated connections (io/secure_channel.h), admits each with a join
// (same ranks per node, same job), gives it a stable node id, and turns what it hears into the
// shell's calls: add_node, node_event, remove_node. A node is lost when its connection closes
// (a SIGKILLed node is seen at once from the TCP reset) or after `heartbeat_timeout` of
// silence (a SIGSTOPped or partitioned node). Event fields naming a node are rewritten to the
// sender's id: a node speaks only for itself.
// Thread-safety: loop thread only.
#pragma once

#include <memory>
#include <string>

#include "core/result.h"
#include "io/deps.h"
#include "net/secret.h"
#include "supervisor/supervisor.h"

namespace shardguard::supervisor {

struct ClusterServerOptions {
  std::string listen_address = "0.0.0.0";
  uint16_t port = 0;  // 0: any
  std::shared_ptr<const net::Secret> secret;
  std::string name = "coordinator";
  uint32_t nproc_per_node = 1;
  std::string job_id;
  Duration heartbeat_timeout = std::chrono::seconds(3);
  // Node ids below this are the node ranks nodes ask for; others are handed out from here.
  NodeId first_free_id = 1000;
};

class ClusterServer {
 public:
  ClusterServer(const io::Deps& deps, ClusterServerOptions options, Supervisor& shell);
  ~ClusterServer();

  // Listens; returns the bound port.
  Result<uint16_t> start();
  // The job's id (known once the shell took the checkpoint directory); joins naming another
  // job are refused.
  void set_job_id(const std::string& job_id);
  // The job is over: every node is told its exit code, then the connections close.
  void finish(int exit_code, const std::string& summary);
  void stop();
  // Nodes connected and admitted now.
  size_t nodes() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace shardguard::supervisor
