#include "supervisor/event_log.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <fstream>
#include <sstream>

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
  // 0640 whatever the umask, and never through a link (fopen's "a" asks for 0666).
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0640);
  if (fd < 0) return Error::from_errno("open '" + path + "'", errno);
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
  std::ifstream in(path);
  if (!in) return Error::from_errno("open '" + path + "'", errno);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_events(text.str());
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
