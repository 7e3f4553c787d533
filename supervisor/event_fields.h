// The fields of one timeline record (events.jsonl): typed values keyed by name. Shared by the
// decision core, which says what to record, and the event log, which writes it.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace shardguard::supervisor {

using EventValue = std::variant<int64_t, uint64_t, double, bool, std::string>;

struct EventField {
  std::string key;
  EventValue value;
};

using EventFields = std::vector<EventField>;

}  // namespace shardguard::supervisor
