#include "net/log_limiter.h"

namespace shardguard::net {

bool LogLimiter::admit(int cause, SteadyTime now) {
  auto [it, fresh] = windows_.try_emplace(cause, Window{now});
  Window& w = it->second;
  if (!fresh && now - w.start >= window_) {
    // A new window; a count still held from the old one is reported by take_suppressed() only
    // if nobody asked before, so keep it rather than lose it.
    w.start = now;
    w.logged = 0;
  }
  if (w.logged < per_window_) {
    ++w.logged;
    return true;
  }
  ++w.suppressed;
  return false;
}

std::vector<LogLimiter::Suppressed> LogLimiter::take_suppressed(SteadyTime now) {
  std::vector<Suppressed> out;
  for (auto& [cause, w] : windows_) {
    if (w.suppressed > 0 && now - w.start >= window_) {
      out.push_back({cause, w.suppressed});
      w.suppressed = 0;
    }
  }
  return out;
}

bool LogLimiter::has_suppressed() const {
  for (const auto& [cause, w] : windows_) {
    if (w.suppressed > 0) return true;
  }
  return false;
}

}  // namespace shardguard::net
