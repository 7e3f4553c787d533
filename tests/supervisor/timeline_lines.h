// Hand-written events.jsonl lines for the timeline tests, and a timeline fed with them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "supervisor/timeline.h"

namespace shardguard::supervisor {

// One events.jsonl line at `t` ms: `fields` is the rest of the JSON object ("" for none).
inline std::string L(int64_t t, const std::string& event, const std::string& fields = "") {
  return "{\"time_unix_ms\":" + std::to_string(t) + ",\"event\":\"" + event + "\"" +
         (fields.empty() ? "" : "," + fields) + "}";
}

inline Timeline feed(const std::vector<std::string>& lines, TimelineOptions o = {}) {
  Timeline t(std::move(o));
  for (const auto& l : lines) t.add_line(l);
  return t;
}

}  // namespace shardguard::supervisor
