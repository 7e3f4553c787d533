// Helpers shared by the agent tests: a notice sink that records what a source delivered.
#pragma once

#include <vector>

#include "agent/notice.h"

namespace shardguard::testing {

struct NoticeCollector {
  std::vector<agent::Notice> notices;
  agent::NoticeSource::Callback sink() {
    return [this](const agent::Notice& n) { notices.push_back(n); };
  }
};

}  // namespace shardguard::testing
