// NodeRunner: one node's part of the job. It executes the commands the decision core sends to
// nodes (launch this epoch's ranks, tear them down, checkpoint_now, abort a save, collect a
// hang report) with a JobLauncher and the control socket, and reports what happens as events
// (ranks said hello, heartbeated, began, committed or failed a save, passed at_step, exited;
// the node's ranks are all gone). For one node the reports go straight to the coordinator in
// the same process; for many they travel over the authenticated network plane - the same
// events either way.
//
// A commit claimed by a rank is reported only after the manifest was read back from the
// checkpoint directory (on the worker) and matches the epoch, the job and the step; only the
// node of global rank 0 reports commits. A hello is admitted only for a rank of this node in
// the current epoch, with the job's id.
// Thread-safety: loop thread only.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/result.h"
#include "io/deps.h"
#include "supervisor/event_fields.h"
#include "supervisor/job_config.h"
#include "supervisor/job_launcher.h"
#include "supervisor/machine_events.h"

namespace shardguard::supervisor {

struct NodeRunnerOptions {
  NodeId node = 0;
  JobConfig config;            // command, env, checkpoint dir, signal, term grace, schedule
  std::string control_socket;  // path of the control socket to serve
  std::string run_dir;         // per-attempt rank logs and hang reports go below it
};

class NodeRunner {
 public:
  using Report = std::function<void(Event)>;
  using RecordFn = std::function<void(std::string_view type, EventFields fields)>;

  NodeRunner(const io::Deps& deps, NodeRunnerOptions options, JobLauncher& launcher,
             Report report, RecordFn record);
  ~NodeRunner();

  // Serves the control socket.
  Status start();
  // Executes a command addressed to the nodes (Launch, TearDown, CheckpointNow, AbortSave,
  // CollectHangReport); other commands are ignored.
  void apply(const Command& command);
  // Kills whatever runs (the job is over) and closes the socket.
  void stop();
  // The node's id, when it is learned after construction (a node welcomed by a coordinator).
  void set_node(NodeId node);
  // The job's id, when it is learned after construction (from the coordinator).
  void set_job_id(const std::string& job_id);
  // Where reports go from now on (a node that becomes the coordinator keeps its ranks).
  void set_report(Report report);
  NodeId node() const;
  // The epoch whose ranks run here now, if any (told to a restarted coordinator on rejoin).
  std::optional<Epoch> running_epoch() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The directory of one attempt's logs: <run_dir>/attempt-NNN.
std::string attempt_dir(const std::string& run_dir, Epoch epoch);

}  // namespace shardguard::supervisor
