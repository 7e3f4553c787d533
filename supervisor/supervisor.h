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
#include "supervisor/job_config.h"

namespace shardguard::supervisor {

class Supervisor {
 public:
  Supervisor(const io::Deps& deps, JobConfig config);
  ~Supervisor();

  // Prepares the run directory and the control socket, then starts the job; the loop does
  // the rest.
  Status start();
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

  // True once the job has ended; exit_code() is then the code of `shardguard run`.
  bool finished() const;
  int exit_code() const;
  std::string state() const;  // "running", "backoff", "succeeded", ...
  // Prometheus text exposition of the run's metrics.
  std::string metrics_text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::supervisor
