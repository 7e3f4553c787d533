#include "agent/drain_source.h"

#include <spdlog/spdlog.h>

#include <boost/json.hpp>
#include <functional>

namespace shardguard::agent {

namespace json = boost::json;

Result<DrainRequest> parse_drain_request(std::string_view text) {
  DrainRequest request;
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return request;
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) return Error(ErrorCode::kInvalid, "drain request: bad JSON: " + ec.message());
  const json::object* obj = v.if_object();
  if (obj == nullptr) return Error(ErrorCode::kInvalid, "drain request: not a JSON object");
  if (const json::value* d = obj->if_contains("deadline_unix_ms"); d && !d->is_null()) {
    if (d->is_int64()) {
      request.deadline = from_unix_ms(d->get_int64());
    } else if (d->is_uint64()) {
      request.deadline = from_unix_ms(static_cast<int64_t>(d->get_uint64()));
    } else {
      return Error(ErrorCode::kInvalid, "drain request: 'deadline_unix_ms' is not an integer");
    }
  }
  if (const json::value* r = obj->if_contains("reason"); r && !r->is_null()) {
    if (!r->is_string())
      return Error(ErrorCode::kInvalid, "drain request: 'reason' is not a string");
    request.reason = std::string(r->get_string());
  }
  return request;
}

Status write_drain_request(Filesystem& fs, const std::string& path,
                           std::optional<WallTime> deadline, std::string_view reason) {
  json::object obj;
  if (deadline) obj["deadline_unix_ms"] = to_unix_ms(*deadline);
  if (!reason.empty()) obj["reason"] = reason;
  SG_RETURN_IF_ERROR(fs.create_dirs(parent_dir(path)));
  Status s = atomic_write_file(fs, path, json::serialize(obj) + "\n");
  if (!s.ok()) return std::move(s).error().context("write drain request");
  return ok_status();
}

DrainSource::DrainSource(DrainSourceConfig config, Filesystem& fs, const Clock& clock,
                         TimerFactory& timers)
    : config_(std::move(config)),
      fs_(fs),
      clock_(clock),
      timer_(timers, config_.poll_interval, BackoffConfig{}, nullptr) {}

DrainSource::~DrainSource() { stop(); }

void DrainSource::start(Callback on_notice) {
  stop();
  set_callback(std::move(on_notice));
  timer_.soon(guard_.wrap([this] { check(); }));
}

void DrainSource::stop() {
  guard_.invalidate();
  clear_callback();
  timer_.cancel();
}

void DrainSource::check() {
  count_poll();
  timer_.after_answer(guard_.wrap([this] { check(); }));  // before delivering: stop() wins
  auto exists = fs_.exists(config_.path);
  if (!exists.ok() || !*exists) {
    if (!exists.ok()) count_error();
    if (present_) ++episode_;
    present_ = false;
    return;
  }
  present_ = true;
  auto text = fs_.read_file(config_.path);
  if (!text.ok()) {  // removed between the two calls, or unreadable: look again next time
    count_error();
    return;
  }
  const WallTime now = clock_.wall_now();
  Notice n;
  n.source = "drain";
  n.kind = "drain";
  n.is_preemption = true;
  n.deadline = now + config_.default_grace;
  auto request = parse_drain_request(*text);
  if (request.ok()) {
    if (request->deadline) n.deadline = not_before(*request->deadline, now);
    n.detail = request->reason.empty() ? "drain requested" : request->reason;
  } else {
    // The file's presence is the operator's intent; a garbled body only loses the details.
    count_error();
    n.detail = "drain requested (" + request.error().message() + ")";
  }
  n.event_id =
      "drain-" + std::to_string(episode_) + "-" + std::to_string(std::hash<std::string>{}(*text));
  if (deliver(n.event_id, n) && !request.ok()) {
    spdlog::warn("drain: '{}': {}; using the default grace", config_.path,
                 request.error().message());
  }
}

}  // namespace shardguard::agent
