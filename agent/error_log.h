// ErrorLog: rate-limited logging of "no information" answers from a notice source. A flaky
// metadata endpoint can fail every second for hours; the first failure of each window is a
// warning (with the count of those suppressed since), the rest go to debug.
//
// Thread-safety: none; one per source, on the loop thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/clock.h"

namespace shardguard::agent {

class ErrorLog {
 public:
  ErrorLog(std::string source, const Clock& clock, Duration window = std::chrono::seconds(60));
  // Logs one failed poll: "<source>: <what>".
  void failure(std::string_view what);
  // Logs that answers came back after failures (at info at most once per window).
  void recovered();
  uint64_t consecutive_failures() const { return consecutive_; }

 private:
  std::string source_;
  const Clock& clock_;
  Duration window_;
  SteadyTime last_warn_{};
  bool warned_ = false;
  SteadyTime last_recovery_{};
  bool recovery_logged_ = false;
  uint64_t suppressed_ = 0;
  uint64_t consecutive_ = 0;
};

}  // namespace shardguard::agent
