// Notices: what every preemption source (cloud metadata, signals, an operator's drain)
// turns its provider's wire format into, and the NoticeSource interface the agent drives.
//
// Thread-safety: a NoticeSource is started, stopped and acknowledged on the EventLoop thread
// and calls on_notice there. counters() may be read from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>

#include "core/clock.h"

namespace shardguard::agent {

struct Notice {
  std::string source;          // "aws", "gcp", "azure", "signal", "drain"
  std::string kind;            // "spot-interruption", "rebalance", "maintenance", "preempted", ...
  WallTime deadline{};         // when the machine goes away; never before the time of receipt.
                               // For advisories (is_preemption false): a horizon, not a promise.
  std::string detail;          // provider's words, for logs and the events file
  std::string event_id;        // provider's id (Azure EventId, used by acknowledge()); may be empty
  bool is_preemption = false;  // true: the machine goes away; false: advisory
};

// Snapshot of a source's counters.
struct NoticeCounters {
  uint64_t polls = 0;    // requests or checks made
  uint64_t errors = 0;   // answers that carried no information (timeouts, 5xx, bad bodies)
  uint64_t notices = 0;  // notices delivered
};

class NoticeSource {
 public:
  using Callback = std::function<void(const Notice&)>;
  virtual ~NoticeSource();

  // Short stable name: "aws", "gcp", "azure", "signal", "drain".
  virtual std::string_view name() const = 0;
  // Begins watching; each distinct notice is passed to on_notice once, on the loop thread,
  // never inside start() itself. Calling start() on a started source restarts it.
  virtual void start(Callback on_notice) = 0;
  // Stops watching: no on_notice call happens after stop() returns. Idempotent. May be
  // called from inside on_notice; the source must not be destroyed from inside it.
  virtual void stop() = 0;
  // Tells the provider the job is ready (Azure StartRequests once the emergency checkpoint
  // has committed). Best effort and asynchronous; a no-op for most sources.
  virtual void acknowledge(const Notice& notice) {}

  NoticeCounters counters() const;

 protected:
  void set_callback(Callback on_notice) { on_notice_ = std::move(on_notice); }
  // Called by stop(): later deliver() calls do nothing until the next start().
  void clear_callback() { on_notice_ = nullptr; }
  // Delivers `notice` unless one with the same `key` was delivered before (ever, across
  // restarts) or the source is stopped. Returns true when delivered.
  bool deliver(const std::string& key, const Notice& notice);
  void count_poll() { polls_.fetch_add(1, std::memory_order_relaxed); }
  void count_error() { errors_.fetch_add(1, std::memory_order_relaxed); }

 private:
  Callback on_notice_;
  std::set<std::string> delivered_;
  std::atomic<uint64_t> polls_{0}, errors_{0}, notices_{0};
};

// `t`, or `now` when `t` is earlier: a deadline already in the past means "act now".
inline WallTime not_before(WallTime t, WallTime now) { return t < now ? now : t; }

}  // namespace shardguard::agent
