// A node supervisor's network side (DESIGN.md 6b): connects to the coordinator over an
// authenticated connection, joins (asking for its node rank, or its old id when rejoining),
// heartbeats every second, forwards what its NodeRunner reports (step changes batched, at most
// one report per `step_forward_interval`) and its local notices, and applies the commands it
// receives to the NodeRunner. While the coordinator is away the ranks keep training and the
// client keeps reconnecting; after `coordinator_timeout` without one it gives up. A notice
// that asks this node to stop (SIGTERM, a preemption) while no coordinator is connected is
// honoured alone: the ranks are stopped before the notice's deadline and the node ends.
// Thread-safety: loop thread only.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agent/notice.h"
#include "core/result.h"
#include "io/deps.h"
#include "net/secret.h"
#include "supervisor/machine_events.h"
#include "supervisor/node_runner.h"

namespace shardguard::supervisor {

struct ClusterClientOptions {
  std::string host;
  uint16_t port = 0;
  std::shared_ptr<const net::Secret> secret;
  std::string name;                     // this node's name (host name) for logs
  std::string address;                  // where ranks reach this node (MASTER_ADDR)
  std::optional<NodeId> node_rank;      // asked for at the first join
  uint32_t nproc = 1;
  std::string job_id;                   // empty: the coordinator's
  Duration heartbeat = std::chrono::seconds(1);
  Duration step_forward_interval = std::chrono::milliseconds(100);
  Duration coordinator_timeout = std::chrono::minutes(2);
  // After the coordinator has been away this long, on_away is called (a successor may be due).
  Duration takeover_after = std::chrono::seconds(2);
  // The ranks' term grace: a notice that asks this node to stop while no coordinator is
  // connected stops the ranks alone this long (and a second) before the notice's deadline.
  Duration term_grace = std::chrono::seconds(3);
  // At most one line a period about a coordinator that cannot be reached.
  Duration unreachable_log_period = std::chrono::seconds(10);
};

class ClusterClient {
 public:
  // `runner` is this node's; its reports must go to report() (see NodeRunner's constructor).
  ClusterClient(const io::Deps& deps, ClusterClientOptions options, NodeRunner& runner);
  ~ClusterClient();

  Status start();
  // What the node runner reports.
  void report(Event event);
  // A notice from this node's agent; `on_ack` is called if the coordinator acknowledges it.
  void notice(const agent::Notice& notice);
  void unhealthy(const std::string& evidence, WallTime deadline);
  void set_on_acknowledge(std::function<void(const agent::Notice&)> cb);
  // Called once per target, `takeover_after` into the absence of its coordinator.
  void set_on_away(std::function<void()> cb);
  // Reconnect to another coordinator from now on (a successor). The absence goes on:
  // coordinator_timeout counts from when the last coordinator was lost (or from the start when
  // none was ever reached), however often the target changes.
  void retarget(const std::string& host, uint16_t port);
  // Whether this node was welcomed by a coordinator in this run (it has a place in the job).
  bool joined() const;
  // Stop talking to any coordinator: this node became the coordinator itself.
  void detach();
  // The job is over (the coordinator said so, or it stayed away): the exit code to use.
  bool finished() const;
  int exit_code() const;
  const std::string& job_id() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace shardguard::supervisor
