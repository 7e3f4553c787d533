// The run's timeline: one JSON object per line in <run_dir>/events.jsonl, appended and
// flushed per event (never truncated, so every attempt's history stays). `shardguard
// status` reads it back. Thread-safety: one writer thread (the supervisor's loop).
#pragma once

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/result.h"
#include "supervisor/event_fields.h"

namespace shardguard::supervisor {

class EventLog {
 public:
  EventLog() = default;
  ~EventLog();
  EventLog(EventLog&&) noexcept;
  EventLog& operator=(EventLog&&) noexcept;

  static Result<EventLog> open(const std::string& path, Clock& clock);
  // Appends {"time_unix_ms":..,"event":type, fields...}. Errors are logged, not returned:
  // a full disk must not stop the supervisor.
  void write(std::string_view type, std::initializer_list<EventField> fields = {});
  void write(std::string_view type, const EventFields& fields);
  const std::string& path() const { return path_; }

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  Clock* clock_ = nullptr;
};

// Parses events.jsonl into rows of (key, rendered value), skipping lines that do not parse.
struct EventRecord {
  int64_t time_unix_ms = 0;
  std::string type;
  std::vector<std::pair<std::string, std::string>> fields;
};
// Far beyond any run's timeline (a record per launch, checkpoint and notice, not per step).
inline constexpr size_t kMaxEventsFileBytes = size_t{1} << 30;
// Reads a regular file only: a link or FIFO at the path, or a file over kMaxEventsFileBytes,
// is an error naming it.
Result<std::vector<EventRecord>> read_events(const std::string& path);
// The same, of the file's text.
std::vector<EventRecord> parse_events(std::string_view text);

}  // namespace shardguard::supervisor
