#include "agent/error_log.h"

#include <spdlog/spdlog.h>

namespace shardguard::agent {

ErrorLog::ErrorLog(std::string source, const Clock& clock, Duration window)
    : source_(std::move(source)), clock_(clock), window_(window) {}

void ErrorLog::failure(std::string_view what) {
  ++consecutive_;
  const SteadyTime now = clock_.now();
  if (!warned_ || now - last_warn_ >= window_) {
    if (suppressed_ > 0) {
      spdlog::warn("{}: {} (no notice information; {} similar messages suppressed)", source_, what,
                   suppressed_);
    } else {
      spdlog::warn("{}: {} (no notice information; retrying with backoff)", source_, what);
    }
    warned_ = true;
    last_warn_ = now;
    suppressed_ = 0;
    return;
  }
  ++suppressed_;
  spdlog::debug("{}: {}", source_, what);
}

void ErrorLog::recovered() {
  if (consecutive_ == 0) return;
  const SteadyTime now = clock_.now();
  if (!recovery_logged_ || now - last_recovery_ >= window_) {
    spdlog::info("{}: answering again after {} failed polls", source_, consecutive_);
    recovery_logged_ = true;
    last_recovery_ = now;
  } else {
    spdlog::debug("{}: answering again after {} failed polls", source_, consecutive_);
  }
  consecutive_ = 0;
}

}  // namespace shardguard::agent
