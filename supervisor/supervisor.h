// The supervisor's shell for one job (DESIGN.md section 6): it feeds every event to the
// decision core (supervisor/attempt_machine.h) and carries out the commands that come back -
// node commands to the node runner(s), timers on the loop, the timeline in events.jsonl,
// lifecycle hooks, notice acknowledgements, resume selection, retention and quarantine on the
// worker. It decides nothing itself.
//
// One node: the node runner lives in the same process and the reports go straight back here.
// Thread-safety: loop thread only (callbacks run there too).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "agent/notice.h"
#include "core/result.h"
#include "io/deps.h"
#include "supervisor/coordinator_log.h"
#include "supervisor/job_config.h"
#include "supervisor/machine_events.h"

namespace shardguard::supervisor {

class NodeRunner;

// Where the shell's nodes are: one node in this process (a single-node run), this process's
// node plus others over the network (the coordinator embedded in node rank 0), or only others
// (`shardguard coordinator` on a machine that outlives the nodes).
struct SupervisorOptions {
  bool local_node = true;
  NodeId local_node_id = 0;
  std::string local_address;  // MASTER_ADDR when the local node hosts rank 0 (default: config's)
  uint32_t min_nodes = 1;
  uint32_t max_nodes = 1;
  Duration join_window = std::chrono::seconds(0);
  // Multi-node: write each decision to the coordinator's record in the checkpoint directory
  // (supervisor/coordinator_log.h) before acting on it, under this coordinator address.
  bool write_coordinator_log = false;
  std::string coordinator_address;
  // Take over from that record (a restarted or successor coordinator) instead of starting.
  std::optional<CoordinatorState> adopt;
  // This process's node already runs (a node that becomes the coordinator): use it.
  NodeRunner* existing_node = nullptr;
};

class Supervisor {
 public:
  Supervisor(const io::Deps& deps, JobConfig config, SupervisorOptions options = {});
  ~Supervisor();

  // Takes the checkpoint directory (its lease and job id), prepares the run directory and the
  // control socket, then starts the job; the loop does the rest. kFenced means "requeueing
  // will not help" (exit 78): the directory is another job's or in use, or the last runs each
  // ended preempted without committing.
  Status start();
  // The job id in use (the directory's own unless one was given), once start() succeeded.
  const std::string& job_id() const;
  // A notice from this node's agent (cloud, signal, drain): the decision core acts on it.
  void notice(const agent::Notice& notice);
  // The node failed a health check: checkpoint if the ranks can, stop, and exit 75 so the
  // scheduler places the job on a healthy node.
  void report_unhealthy(const std::string& evidence);
  // Called on lifecycle events ("preempt_notice", "checkpoint_committed", "restart",
  // "give_up", "node_unhealthy") with their fields, e.g. to run the job's [[hooks]].
  void set_on_lifecycle(
      std::function<void(std::string_view event, std::map<std::string, std::string> fields)> cb);
  // Called for a notice once the emergency checkpoint it asked for has committed (Azure's
  // StartRequests).
  void set_on_acknowledge(std::function<void(const agent::Notice&)> cb);

  // Multi-node (the network side, supervisor/cluster_server.h, calls these): a node joined and
  // commands for it go through `send`; a node left; a node reported an event.
  // `running`: the epoch whose ranks the node still runs (a rejoin), stopped unless current.
  void add_node(NodeId node, const std::string& address,
                std::function<void(const Command&)> send, std::optional<Epoch> running = {});
  void remove_node(NodeId node, const std::string& why);
  // `node`'s event, from its connection: checked against what that node holds (its own ranks
  // of the running attempt; a commit only from rank 0's node, read back before it counts).
  void node_event(NodeId node, Event event);
  // Called once when the job ends, with its exit code and summary (to tell the nodes).
  void set_on_finish(std::function<void(int exit_code, const std::string& summary)> cb);

  // True once the job has ended; exit_code() is then the code of `shardguard run`.
  bool finished() const;
  int exit_code() const;
  std::string state() const;  // "running", "backoff", "succeeded", ...
  // The deadline of the last emergency checkpoint asked for (a notice's, a stop's), or
  // nullopt: what an exit after it may still use (the hooks of its commit).
  std::optional<WallTime> emergency_deadline() const;
  // Prometheus text exposition of the run's metrics.
  std::string metrics_text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::supervisor
