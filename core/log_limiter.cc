#include "core/log_limiter.h"

#include <spdlog/spdlog.h>

#include "core/units.h"

namespace shardguard {
namespace {

void spdlog_sink(LogLevel level, const std::string& line) {
  switch (level) {
    case LogLevel::kDebug:
      return spdlog::debug("{}", line);
    case LogLevel::kInfo:
      return spdlog::info("{}", line);
    case LogLevel::kWarn:
      return spdlog::warn("{}", line);
    case LogLevel::kError:
      return spdlog::error("{}", line);
  }
}

}  // namespace

LogLimiter::LogLimiter(Clock& clock, LogLimiterOptions options, Sink sink, TimerFactory* timers)
    : clock_(clock),
      options_(options),
      sink_(sink ? std::move(sink) : Sink(spdlog_sink)),
      timers_(timers) {}

LogLimiter::~LogLimiter() {
  Pending out;
  {
    std::lock_guard lock(mu_);
    for (auto& [name, cause] : causes_) {
      if (cause.timer) cause.timer->cancel();
      close_window_locked(name, cause, out);
    }
  }
  emit(out);
}

bool LogLimiter::log(std::string_view cause_name, LogLevel level, std::string_view message) {
  Pending out;
  bool written = false;
  {
    std::lock_guard lock(mu_);
    const SteadyTime now = clock_.now();
    auto it = causes_.find(cause_name);
    if (it == causes_.end()) {
      if (causes_.size() >= options_.max_causes) forget_idle_locked(now, out);
      it = causes_.emplace(std::string(cause_name), Cause{}).first;
      it->second.window_start = now;
    }
    Cause& cause = it->second;
    if (now - cause.window_start >= options_.window) {
      close_window_locked(it->first, cause, out);
      cause.window_start = now;
    }
    cause.level = level;
    if (cause.written < options_.max_lines) {
      ++cause.written;
      out.emplace_back(level, std::string(message));
      written = true;
    } else {
      if (cause.suppressed++ == 0 && timers_ != nullptr) {
        // Summarise when the window ends even if the burst stops here.
        if (!cause.timer) cause.timer = timers_->make_timer();
        cause.timer->arm(cause.window_start + options_.window - now, [this] { flush(); });
      }
      ++suppressed_total_;
    }
  }
  emit(out);
  return written;
}

void LogLimiter::flush() {
  Pending out;
  {
    std::lock_guard lock(mu_);
    const SteadyTime now = clock_.now();
    for (auto& [name, cause] : causes_) {
      if (cause.suppressed > 0 && now - cause.window_start >= options_.window) {
        close_window_locked(name, cause, out);
        cause.window_start = now;
      }
    }
  }
  emit(out);
}

uint64_t LogLimiter::suppressed_total() const {
  std::lock_guard lock(mu_);
  return suppressed_total_;
}

// Ends the cause's window: its summary (if lines were suppressed) goes to `out`.
void LogLimiter::close_window_locked(const std::string& name, Cause& cause, Pending& out) {
  if (cause.suppressed > 0) {
    out.emplace_back(cause.level, name + ": ... and " + std::to_string(cause.suppressed) +
                                      " more in the last " + format_duration(options_.window));
  }
  cause.written = 0;
  cause.suppressed = 0;
}

// Keeps the map bounded: causes whose window is over are summarised and dropped.
void LogLimiter::forget_idle_locked(SteadyTime now, Pending& out) {
  for (auto it = causes_.begin(); it != causes_.end();) {
    if (now - it->second.window_start >= options_.window) {
      close_window_locked(it->first, it->second, out);
      it = causes_.erase(it);
    } else {
      ++it;
    }
  }
}

void LogLimiter::emit(const Pending& lines) const {
  for (const auto& [level, line] : lines) sink_(level, line);
}

}  // namespace shardguard
