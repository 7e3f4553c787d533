// User lifecycle hooks: on a job event (preempt_notice, checkpoint_committed, restart,
// give_up, node_unhealthy, divergence) run a command and/or POST the event as JSON to a URL, as the
// `[hooks]` config section asks. Everything runs on the EventLoop: fire() only queues work,
// so a slow, hanging or failing hook is logged and never delays the caller.
//
//   command: argv (no shell), the event in the environment (SHARDGUARD_EVENT=<name>,
//            SHARDGUARD_EVENT_<FIELD>=<value>), stdin /dev/null, output to ours; at its
//            timeout its whole process group is killed (SIGKILL).
//   url:     POST {"event":..,"time_unix_ms":..,"fields":{..}} (Content-Type JSON) with the
//            timeout per attempt; a non-2xx answer or an error is retried `retries` times
//            with exponential backoff, then given up.
//
// At most max_concurrent_commands hook processes and max_concurrent_webhooks webhook runs
// (a webhook run keeps its slot through its retries) are in progress at once; the rest wait
// in a FIFO queue per kind. A queue holds at most max_queued entries: beyond that the oldest
// waiting one is dropped (counted as failed and dropped, with a rate-limited warning), so a
// flood of events (issue 11: 300 claimed commits) costs neither 300 processes nor memory.
//
// Thread-safety: fire(), stats() and idle() may be called from any thread. Construct and
// destroy on the loop thread or while the loop is not running; destroying (or stop()) drops
// queued work, kills the groups of running commands and abandons webhooks in flight, logging
// each command killed and each run dropped, with why. An exiting `shardguard run` first lets
// the runs in flight finish (cli/job_services.h).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/result.h"

namespace shardguard::io {
class EventLoop;
class HttpClient;
class ProcessLauncher;
}  // namespace shardguard::io

namespace shardguard::hooks {

inline constexpr std::array<std::string_view, 6> kHookEvents = {
    "preempt_notice", "checkpoint_committed", "restart", "give_up", "node_unhealthy", "divergence"};
inline constexpr int kMaxHookRetries = 10;

struct HookSpec {
  std::string event;                            // one of kHookEvents
  std::vector<std::string> command;             // argv; empty: no command
  std::string url;                              // http://...; empty: no webhook
  Duration timeout = std::chrono::seconds(30);  // per command run / per HTTP attempt
  int retries = 2;                              // extra webhook attempts after a failure (0..10)
};

// Event fields, e.g. {"step": "1200", "manifest": "/ckpt/step-000001200/manifest.json"}.
using EventFields = std::map<std::string, std::string>;

// kInvalid naming the problem: unknown event, neither command nor url, an empty argv[0],
// a URL that is not http://host..., a timeout <= 0, retries outside 0..kMaxHookRetries.
Status validate_hook(const HookSpec& spec);

// SHARDGUARD_EVENT_<KEY>: the key upper-cased, anything but [A-Z0-9] turned into '_'.
std::string event_env_name(std::string_view key);

struct LifecycleHooksOptions {
  Duration backoff_initial = std::chrono::milliseconds(200);  // before the first retry
  Duration backoff_max = std::chrono::seconds(5);             // doubling stops here
  size_t max_concurrent_commands = 4;                         // hook processes running at once
  size_t max_concurrent_webhooks = 4;                         // webhook runs in progress at once
  size_t max_queued = 256;  // waiting per kind; beyond: the oldest is dropped
};

// Counters since construction (each hook run counts once, whatever its retries).
struct HookStats {
  uint64_t fired = 0;          // hook runs queued by fire()
  uint64_t succeeded = 0;      // command exited 0 / webhook got a 2xx
  uint64_t failed = 0;         // launch error, non-zero exit, timeout, retries used up
  uint64_t timed_out = 0;      // commands killed at their timeout
  uint64_t http_attempts = 0;  // every POST sent, retries included
  uint64_t in_flight = 0;      // runs not finished yet
  uint64_t dropped = 0;        // commands or webhooks dropped from a full queue (also failed)
  uint64_t queued = 0;         // commands and webhooks waiting for a slot now
  uint64_t peak_commands = 0;  // most hook processes ever running at once
  uint64_t peak_webhooks = 0;  // most webhook runs ever in progress at once
};

class LifecycleHooks {
 public:
  // Validates every spec (errors name the hook by index and event).
  static Result<std::unique_ptr<LifecycleHooks>> create(io::EventLoop& loop,
                                                        io::ProcessLauncher& launcher,
                                                        io::HttpClient& http, TimerFactory& timers,
                                                        Clock& clock, std::vector<HookSpec> specs,
                                                        LifecycleHooksOptions options = {});
  ~LifecycleHooks();
  LifecycleHooks(const LifecycleHooks&) = delete;
  LifecycleHooks& operator=(const LifecycleHooks&) = delete;

  // Queues every hook of `event` with `fields` and returns at once; an event without
  // hooks (or an unknown one) does nothing. Returns how many hook runs were queued.
  size_t fire(std::string_view event, EventFields fields = {});
  HookStats stats() const;

  // True when no hook run is running or waiting.
  bool idle() const;
  // The longest one hook run may take by its own limits (a command's timeout; a webhook's
  // attempts with their back-offs): how long an exit waits for the runs in flight.
  Duration longest_run() const;
  // Kills the commands still running (each logged with its command and `why`) and drops the
  // webhooks and runs still waiting, as the destructor does ("shardguard is exiting").
  // Loop thread.
  void stop(const std::string& why);

  struct Impl;

 private:
  explicit LifecycleHooks(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace shardguard::hooks
