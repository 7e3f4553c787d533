#include "supervisor/event_log.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <fstream>
#include <sstream>

#include "core/open_regular.h"

namespace shardguard::supervisor {
namespace json = boost::json;

EventLog::~EventLog() {
  if (file_ != nullptr) std::fclose(file_);
}

EventLog::EventLog(EventLog&& o) noexcept : file_(o.file_), path_(std::move(o.path_)), clock_(o.clock_) {
  o.file_ = nullptr;
}

EventLog& EventLog::operator=(EventLog&& o) noexcept {
  if (this != &o) {
    if (file_ != nullptr) std::fclose(file_);
    file_ = o.file_;
    path_ = std::move(o.path_);
    clock_ = o.clock_;
    o.file_ = nullptr;
  }
  return *this;
}

Result<EventLog> EventLog::open(const std::string& path, Clock& clock) {
  EventLog log;
  // 0640 whatever the umask, never through a link (fopen's "a" asks for 0666), and never a
  // FIFO or device a neighbour put at the name (opening a FIFO for writing would hang `run`).
  SG_ASSIGN_OR_RETURN(const int fd,
                      open_regular(path, O_WRONLY | O_CREAT | O_APPEND, 0640, "the events file"));
  log.file_ = ::fdopen(fd, "a");
  if (log.file_ == nullptr) {
    const int err = errno;
    ::close(fd);
    return Error::from_errno("open '" + path + "'", err);
  }
  log.path_ = path;
  log.clock_ = &clock;
  return log;
}

void EventLog::write(std::string_view type, std::initializer_list<EventField> fields) {
  write(type, EventFields(fields));
}

void EventLog::write(std::string_view type, const EventFields& fields) {
  if (file_ == nullptr) return;
  json::object o;
  o["time_unix_ms"] = to_unix_ms(clock_->wall_now());
  o["event"] = type;
  for (const auto& f : fields)
    std::visit([&](const auto& v) { o[f.key] = v; }, f.value);
  std::string line = json::serialize(o) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    spdlog::warn("events: cannot write '{}': {}", path_, std::strerror(errno));
}

Result<std::vector<EventRecord>> read_events(const std::string& path) {
  // `status` and `report` read a run directory others may write into: no link followed, no
  // FIFO blocked on, and no more than kMaxEventsFileBytes read.
  SG_ASSIGN_OR_RETURN(auto text, read_regular_file(path, kMaxEventsFileBytes, "the events file"));
  return parse_events(text);
}

std::vector<EventRecord> parse_events(std::string_view text) {
  std::vector<EventRecord> out;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    boost::system::error_code ec;
    json::value v = json::parse(line, ec);
    if (ec || !v.is_object()) continue;
    EventRecord r;
    for (const auto& kv : v.get_object()) {
      if (kv.key() == "time_unix_ms" && kv.value().is_int64()) {
        r.time_unix_ms = kv.value().get_int64();
      } else if (kv.key() == "event" && kv.value().is_string()) {
        r.type = kv.value().get_string();
      } else {
        r.fields.emplace_back(std::string(kv.key()),
                              kv.value().is_string() ? std::string(kv.value().get_string())
                                                     : json::serialize(kv.value()));
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace shardguard::supervisor
