// Shared pieces of the Slurm smoke tests: skipping where Slurm cannot run, starting a
// cluster, and batch scripts whose processes record the signals they get
// (tests/support/signal_recorder.sh) so each test can state exactly what Slurm sent.
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "tests/support/signal_log.h"
#include "tests/support/slurm_cluster.h"
#include "tests/support/temp_dir.h"

namespace shardguard::testing {

#define SG_SLURM_OR_SKIP()                               \
  do {                                                   \
    if (auto why = SlurmCluster::unavailable_reason()) { \
      WARN("SKIPPED: " << *why);                         \
      return;                                            \
    }                                                    \
  } while (0)

inline std::unique_ptr<SlurmCluster> start_cluster(SlurmOptions options = {}) {
  auto c = SlurmCluster::start(std::move(options));
  if (!c.ok()) FAIL("Slurm cluster did not start: " << c.error().message());
  return std::move(c).value();
}

inline uint32_t submit_or_fail(SlurmCluster& c, const std::string& script,
                               const std::vector<std::string>& args = {}) {
  auto id = c.submit(script, args);
  if (!id.ok()) FAIL(id.error().message());
  return *id;
}

inline SlurmJob wait_state_or_fail(const SlurmCluster& c, uint32_t id,
                                   const std::vector<std::string>& states,
                                   std::chrono::milliseconds timeout) {
  auto j = c.wait_job_state(id, states, timeout);
  if (!j.ok()) FAIL(j.error().message() << "\nslurmctld log:\n" << c.ctld_log_tail(3000));
  return *j;
}

// What a recording job runs: the batch shell becomes a recorder "batch" (exec), with a child
// "batch.child" if `batch_child`; `step_tasks` > 0 adds one srun step whose tasks are
// recorders named "step<PROCID>", each with a child "step<PROCID>.child".
struct RecorderJob {
  std::string log;
  int step_tasks = 1;
  std::string srun_args;         // e.g. "-N2 --ntasks-per-node=1"
  std::string batch_extra = "";  // e.g. "--exit-on-term 75 1000"
  bool batch_child = true;
};

inline std::string recorder_script(const RecorderJob& job) {
  const std::string rec = signal_recorder_bin();
  std::string s = "#!/bin/bash\n";
  if (job.step_tasks > 0)
    s += "srun " + job.srun_args + " -n " + std::to_string(job.step_tasks) +
         " bash -c 'exec \"$0\" step$SLURM_PROCID \"$1\" --child' '" + rec + "' '" + job.log +
         "' &\n";
  s += "exec '" + rec + "' batch '" + job.log + "' " + (job.batch_child ? "--child " : "") +
       job.batch_extra + "\n";
  return s;
}

// Polls the log until `who` has logged `event` (bounded); returns the log parsed.
inline std::vector<SignalEvent> wait_event(const std::string& log, const std::string& who,
                                           const std::string& event,
                                           std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto events = parse_signal_log(slurp(log));
    if (first_event(events, who, event)) return events;
    if (std::chrono::steady_clock::now() >= deadline)
      FAIL("no '" << event << "' from " << who << " within " << timeout.count() << " ms; log:\n"
                  << slurp(log));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Polls the log until `who` logs `event` at or after `since` (unix seconds); returns it.
inline SignalEvent wait_event_after(const std::string& log, const std::string& who,
                                    const std::string& event, double since,
                                    std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    for (const auto& e : parse_signal_log(slurp(log)))
      if (e.who == who && e.event == event && e.time >= since) return e;
    if (std::chrono::steady_clock::now() >= deadline)
      FAIL("no '" << event << "' from " << who << " after " << since << " within "
                  << timeout.count() << " ms; log:\n"
                  << slurp(log));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// The events of `who` at or after `since` (unix seconds).
inline std::vector<std::string> events_since(const std::vector<SignalEvent>& log,
                                             const std::string& who, double since) {
  std::vector<std::string> out;
  for (const auto& e : log)
    if (e.who == who && e.time >= since) out.push_back(e.event);
  return out;
}

inline double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace shardguard::testing
