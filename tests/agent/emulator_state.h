// The metadata emulator's shared state and the per-cloud answer functions. Internal to the
// emulator (metadata_emulator.cc serves, emulator_clouds.cc answers, emulator_scenario.cc
// parses scripts). Thread-safety: `mu` guards every mutable field below it.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "tests/agent/emulator_wire.h"
#include "tests/agent/metadata_emulator.h"

namespace shardguard::testing {

struct EmulatorAnswer {
  int status = 200;
  WireHeaders headers;
  std::string body;
};

struct EmulatorState {
  EmulatorScenario scenario;
  std::vector<std::string> azure_event_ids;  // parallel to scenario.azure_events
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::chrono::system_clock::time_point wall_start = std::chrono::system_clock::now();
  std::atomic<bool> stopping{false};

  std::mutex mu;
  std::map<std::string, std::chrono::steady_clock::time_point> aws_tokens;  // -> expiry
  uint64_t next_token = 1;
  std::set<std::string> azure_acked;
  uint64_t aws_role_fetches = 0;  // answers of the role's credentials (for `rotate`)

  int64_t now_ms() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start)
        .count();
  }
};

// Expands ${rfc3339:+N}, ${rfc1123:+N}, ${awstime:+N} and ${unix_ms:+N} relative to
// wall_start + at_ms.
std::string expand_placeholders(const std::string& text,
                                std::chrono::system_clock::time_point wall_start, int64_t at_ms);

// The answer of the timeline for `path` at `now_ms`, or nullopt when the path has none yet.
std::optional<TimedAnswer> timeline_answer(const EmulatorState& s, const std::string& path,
                                           int64_t now_ms);

// Per-cloud answers. `alive()` is false once the client left or the emulator stops (for
// the GCP hanging GET).
EmulatorAnswer answer_aws(EmulatorState& s, const WireRequest& r);
EmulatorAnswer answer_gcp(EmulatorState& s, const WireRequest& r,
                          const std::function<bool()>& alive);
EmulatorAnswer answer_azure(EmulatorState& s, const WireRequest& r);

}  // namespace shardguard::testing
