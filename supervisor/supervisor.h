// The supervisor of one job on one node: launches the ranks (each in its own process
// group) with the environment contract of DESIGN.md section 4, serves the control socket
// (the embedded agent), watches heartbeats for hangs, classifies every exit, restarts by
// policy from the newest complete checkpoint, and on a stop request (SIGTERM, a cloud
// notice, a drain) runs the emergency flow: checkpoint_now + signal to every rank, wait
// for the commit or the deadline, then stop the ranks and report "preempted".
//
// Everything runs on one EventLoop thread; clock, timers, processes and randomness are
// injected so tests can drive it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/clock.h"
#include "core/filesystem.h"
#include "core/result.h"
#include "supervisor/job_config.h"

namespace shardguard::io {
class EventLoop;
class ProcessLauncher;
}  // namespace shardguard::io

namespace shardguard::supervisor {

enum class SupervisorState {
  kPending, kLaunching, kRunning, kCheckpointing, kDraining, kBackoff, kSucceeded, kFailed,
  kPreempted
};
std::string_view supervisor_state_name(SupervisorState state);

struct SupervisorDeps {
  io::EventLoop& loop;
  Clock& clock;
  TimerFactory& timers;
  io::ProcessLauncher& launcher;
  Filesystem& fs;
  std::function<double()> uniform01;  // jitter
};

// A request to checkpoint and stop: from a signal, a cloud notice or a drain.
struct StopRequest {
  std::string reason;   // "sigterm", "aws-spot-interruption", "drain", ...
  WallTime deadline;    // when the machine goes away
  bool preemption = true;  // false: an operator's stop that is not a preemption
};

class Supervisor {
 public:
  Supervisor(SupervisorDeps deps, JobConfig config);
  ~Supervisor();

  // Prepares the run directory and starts the first attempt; the loop does the rest.
  Status start();
  // Runs the emergency flow (or ends a backoff) and stops. Safe to call repeatedly.
  void request_stop(const StopRequest& request);
  // The node failed a health check: checkpoint if the ranks can, stop, and exit 75 so the
  // scheduler places the job on a healthy node (restarting here would not help).
  void report_unhealthy(const std::string& evidence);
  // An extra checkpoint without stopping (an advisory notice such as AWS rebalance).
  void request_checkpoint(const std::string& reason);
  // Called on lifecycle events ("preempt_notice", "checkpoint_committed", "restart",
  // "give_up", "node_unhealthy") with their fields, e.g. to run the job's [[hooks]].
  void set_on_lifecycle(
      std::function<void(std::string_view event, std::map<std::string, std::string> fields)> cb);
  // Called when the emergency checkpoint has committed (e.g. to acknowledge Azure's event).
  void set_on_emergency_committed(std::function<void(uint64_t step)> callback);
  // True once the job has ended; exit_code() is then the code of `shardguard run`.
  bool finished() const;
  int exit_code() const;
  SupervisorState state() const;
  // Prometheus text exposition of the run's metrics.
  std::string metrics_text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::supervisor
