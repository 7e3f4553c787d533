// HealthMonitor: runs health checks on the loop at jittered intervals and decides when the
// node is unhealthy, like mesos' health checker and envoy's: a start grace period in which
// failures do not count, N consecutive failures (per check) before a check is unhealthy, a
// fatal finding (Xid 79, uncorrectable ECC) at once and for good, counters per check. A
// check whose policy says warnings_make_unhealthy = false (the disk) only logs its warnings;
// its timeouts and fatal findings count as any other's.
// on_unhealthy fires once per healthy -> unhealthy transition; on_healthy when every check
// is healthy again (only warning-level unhealthiness recovers).
//
// Thread-safety: none; construct, add, start, stop and query on the loop thread. Callbacks
// run on the loop thread and may call stop(), but must not destroy the monitor.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/backoff.h"
#include "agent/callback_guard.h"
#include "agent/health/health_check.h"
#include "agent/health/health_config.h"
#include "core/clock.h"

namespace shardguard::agent {

// attempts == successes + failures + unavailable.
struct HealthCounters {
  uint64_t attempts = 0;     // runs that answered or timed out
  uint64_t successes = 0;    // kOk
  uint64_t failures = 0;     // kWarning, kFatal, or timed out
  uint64_t unavailable = 0;  // not_available answers (counted in neither of the above)
};

struct CheckStatus {
  std::string name;
  HealthCounters counters;
  bool healthy = true;
  bool fatal = false;     // unhealthy for good (a fatal finding)
  bool available = true;  // false while the last answer was "not available"
  bool in_grace = true;   // the start grace period has not ended
  int consecutive_failures = 0;
  HealthFinding last;     // the last answer
  HealthFinding failing;  // what made it unhealthy (valid while !healthy)
};

class HealthMonitor {
 public:
  using UnhealthyCallback = std::function<void(std::vector<HealthFinding> evidence)>;
  using HealthyCallback = std::function<void()>;

  // `clock` and `timers` must outlive the monitor. `random` draws the interval jitter
  // (make_random() in production, a fixed function in tests).
  HealthMonitor(const Clock& clock, TimerFactory& timers, RandomFn random);
  ~HealthMonitor();
  HealthMonitor(const HealthMonitor&) = delete;
  HealthMonitor& operator=(const HealthMonitor&) = delete;

  // Adds a check; before start() only.
  void add(std::unique_ptr<HealthCheck> check, CheckPolicy policy);
  // Starts every check's schedule (the grace periods start now). Restarting resets all state.
  void start(UnhealthyCallback on_unhealthy, HealthyCallback on_healthy = nullptr);
  // Cancels every timer; answers still in flight are dropped. Idempotent.
  void stop();

  // False from the transition reported to on_unhealthy until recovery.
  bool healthy() const { return !unhealthy_; }
  // The findings of the checks that are unhealthy now (what on_unhealthy got, kept current).
  std::vector<HealthFinding> evidence() const;
  std::vector<CheckStatus> status() const;
  // The check with this name, or nullptr (e.g. to update the disk check's estimate).
  HealthCheck* find(std::string_view name) const;

 private:
  struct Entry;
  void schedule(Entry& e, Duration delay);
  void run(Entry& e);
  void on_answer(Entry& e, uint64_t run_id, HealthFinding finding, bool timed_out = false);
  void judge(Entry& e, const HealthFinding& finding, bool timed_out);
  void update_node();
  Duration jittered(const CheckPolicy& policy);

  const Clock& clock_;
  TimerFactory& timers_;
  RandomFn random_;
  std::vector<std::unique_ptr<Entry>> entries_;
  UnhealthyCallback on_unhealthy_;
  HealthyCallback on_healthy_;
  bool unhealthy_ = false;
  CallbackGuard guard_;
};

}  // namespace shardguard::agent
