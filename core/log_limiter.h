// Rate-limited logging for warnings that an outside party can trigger at will (a client
// flooding a socket, a scraper hammering the metrics port): at most `max_lines` lines per
// `window` for each cause, then one "<cause>: ... and K more in the last <window>" line when
// that window ends. Without it one misbehaving peer fills the disk with log (issue 11 saw
// 685 MB of log from 40 clients).
//
// Time comes from an injected Clock. The summary line is written by the first log() of the
// cause after its window ended, by flush(), or, when a TimerFactory is given, by a timer at
// the end of the window (so a burst that simply stops is still summarised).
//
// Thread-safety: log() and flush() may be called from any thread (a mutex guards the
// counters; the sink runs outside it). With a TimerFactory, call log() on the thread that
// may arm its timers (the EventLoop thread for io::AsioTimerFactory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "core/clock.h"

namespace shardguard {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

struct LogLimiterOptions {
  size_t max_lines = 10;  // per cause and window
  Duration window = std::chrono::seconds(1);
  size_t max_causes = 256;  // causes tracked at once; idle ones are forgotten beyond this
};

class LogLimiter {
 public:
  // Receives each line that passes (and each summary). Default: spdlog at that level.
  using Sink = std::function<void(LogLevel, const std::string&)>;

  explicit LogLimiter(Clock& clock, LogLimiterOptions options = {}, Sink sink = nullptr,
                      TimerFactory* timers = nullptr);
  // Writes the summaries still pending.
  ~LogLimiter();
  LogLimiter(const LogLimiter&) = delete;
  LogLimiter& operator=(const LogLimiter&) = delete;

  // Writes `message` unless `cause` already wrote max_lines in its current window; then it
  // is only counted. Returns whether it was written. Keep causes few and fixed ("line too
  // long"), never per peer: the count is per cause.
  bool log(std::string_view cause, LogLevel level, std::string_view message);
  bool warn(std::string_view cause, std::string_view message) {
    return log(cause, LogLevel::kWarn, message);
  }
  // Writes the summary of every cause whose window has ended with lines suppressed.
  void flush();
  // Lines suppressed since construction, over all causes.
  uint64_t suppressed_total() const;

 private:
  struct Cause {
    SteadyTime window_start{};
    size_t written = 0;
    uint64_t suppressed = 0;
    LogLevel level = LogLevel::kWarn;
    std::unique_ptr<Timer> timer;
  };
  using Pending = std::vector<std::pair<LogLevel, std::string>>;

  void close_window_locked(const std::string& name, Cause& cause, Pending& out);
  void forget_idle_locked(SteadyTime now, Pending& out);
  void emit(const Pending& lines) const;

  Clock& clock_;
  LogLimiterOptions options_;
  Sink sink_;
  TimerFactory* timers_;
  mutable std::mutex mu_;
  std::map<std::string, Cause, std::less<>> causes_;
  uint64_t suppressed_total_ = 0;
};

}  // namespace shardguard
