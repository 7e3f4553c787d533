// Rate limit for log lines about hostile or broken peers, per cause, so that a flood of bad
// connections (a port scan, a peer with the wrong secret in a retry loop) cannot flood the
// log: at most `per_window` lines per cause per window (default 10 per second); the lines past
// that are counted, and the count is reported once the window ends.
//
// Pure: time is an argument. Thread-safety: none; one limiter belongs to one loop thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "core/clock.h"

namespace shardguard::net {

class LogLimiter {
 public:
  explicit LogLimiter(size_t per_window = 10, Duration window = std::chrono::seconds(1))
      : per_window_(per_window), window_(window) {}

  // Whether a line about `cause` may be logged at `now`; if not, it is counted.
  bool admit(int cause, SteadyTime now);

  struct Suppressed {
    int cause;
    uint64_t count;
  };
  // The counts of lines held back in windows that have ended by `now`, once each.
  std::vector<Suppressed> take_suppressed(SteadyTime now);
  // True while some held-back count waits to be reported.
  bool has_suppressed() const;

 private:
  struct Window {
    SteadyTime start;
    size_t logged = 0;
    uint64_t suppressed = 0;
  };
  size_t per_window_;
  Duration window_;
  std::map<int, Window> windows_;
};

}  // namespace shardguard::net
