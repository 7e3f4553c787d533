#include "agent/notice.h"

#include <spdlog/spdlog.h>

namespace shardguard::agent {

NoticeSource::~NoticeSource() = default;

NoticeCounters NoticeSource::counters() const {
  return {polls_.load(std::memory_order_relaxed), errors_.load(std::memory_order_relaxed),
          notices_.load(std::memory_order_relaxed)};
}

bool NoticeSource::deliver(const std::string& key, const Notice& notice) {
  if (!on_notice_ || !delivered_.insert(key).second) return false;
  notices_.fetch_add(1, std::memory_order_relaxed);
  spdlog::info("notice from {}: {} (preemption: {}, deadline_unix_ms {}){}{}", notice.source,
               notice.kind, notice.is_preemption, to_unix_ms(notice.deadline),
               notice.detail.empty() ? "" : ": ", notice.detail);
  Callback callback = on_notice_;  // a copy: the callback may call stop(), which clears it
  callback(notice);
  return true;
}

}  // namespace shardguard::agent
