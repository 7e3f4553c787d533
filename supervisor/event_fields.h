// The fields of one timeline record (events.jsonl): typed values keyed by name. Shared by the
// decision core, which says what to record, and the event log, which writes it.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace shardguard::supervisor {

using EventValue = std::variant<int64_t, uint64_t, double, bool, std::string>;

struct EventField {
  std::string key;
  EventValue value;
};

using EventFields = std::vector<EventField>;

// The value of `key` when it holds a T; nullopt when absent or of another type.
template <typename T>
std::optional<T> field_value(const EventFields& fields, std::string_view key) {
  for (const auto& f : fields)
    if (f.key == key)
      if (const auto* v = std::get_if<T>(&f.value)) return *v;
  return std::nullopt;
}

}  // namespace shardguard::supervisor
