#include "agent/aws_parse.h"

#include <boost/json.hpp>

#include "core/time_formats.h"

namespace shardguard::agent {

namespace json = boost::json;

namespace {

Result<json::value> parse_json(std::string_view body, std::string_view what) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) return Error(ErrorCode::kCorrupt, std::string(what) + ": bad JSON: " + ec.message());
  return v;
}

// The string member `key` of `obj`, or nullptr.
const json::string* string_field(const json::object& obj, std::string_view key) {
  const json::value* v = obj.if_contains(key);
  return v != nullptr && v->is_string() ? &v->get_string() : nullptr;
}

Error bad_body(std::string_view what, std::string_view why) {
  return Error(ErrorCode::kCorrupt, std::string(what) + ": " + std::string(why));
}

}  // namespace

Result<Notice> parse_aws_spot_action(std::string_view body, WallTime now) {
  constexpr std::string_view kWhat = "spot/instance-action";
  SG_ASSIGN_OR_RETURN(json::value v, parse_json(body, kWhat));
  if (!v.is_object()) return bad_body(kWhat, "not a JSON object");
  const json::string* action = string_field(v.get_object(), "action");
  const json::string* time = string_field(v.get_object(), "time");
  if (action == nullptr || action->empty() || time == nullptr) {
    return bad_body(kWhat, "missing string 'action' or 'time'");
  }
  auto when = parse_rfc3339(*time);
  if (!when.ok()) return when.error().context(kWhat);
  Notice n;
  n.source = "aws";
  n.kind = "spot-interruption";
  n.deadline = not_before(*when, now);
  n.detail = "spot instance " + std::string(*action) + " at " + std::string(*time);
  n.event_id = "spot-" + std::string(*action) + "-" + std::string(*time);
  n.is_preemption = true;
  return n;
}

Result<Notice> parse_aws_rebalance(std::string_view body, WallTime now, Duration horizon) {
  constexpr std::string_view kWhat = "events/recommendations/rebalance";
  SG_ASSIGN_OR_RETURN(json::value v, parse_json(body, kWhat));
  if (!v.is_object()) return bad_body(kWhat, "not a JSON object");
  const json::string* notice_time = string_field(v.get_object(), "noticeTime");
  if (notice_time == nullptr) return bad_body(kWhat, "missing string 'noticeTime'");
  auto when = parse_rfc3339(*notice_time);
  if (!when.ok()) return when.error().context(kWhat);
  Notice n;
  n.source = "aws";
  n.kind = "rebalance";
  n.deadline = now + horizon;
  n.detail = "rebalance recommendation issued " + std::string(*notice_time);
  n.event_id = "rebalance-" + std::string(*notice_time);
  n.is_preemption = false;
  return n;
}

Result<std::vector<Notice>> parse_aws_scheduled_events(std::string_view body, WallTime now) {
  constexpr std::string_view kWhat = "events/maintenance/scheduled";
  SG_ASSIGN_OR_RETURN(json::value v, parse_json(body, kWhat));
  if (!v.is_array()) return bad_body(kWhat, "not a JSON array");
  std::vector<Notice> notices;
  for (const json::value& e : v.get_array()) {
    if (!e.is_object()) return bad_body(kWhat, "an element is not an object");
    const json::object& obj = e.get_object();
    const json::string* code = string_field(obj, "Code");
    const json::string* start = string_field(obj, "NotBefore");
    const json::string* state = string_field(obj, "State");
    const json::string* id = string_field(obj, "EventId");
    const json::string* description = string_field(obj, "Description");
    if (code == nullptr || start == nullptr) {
      return bad_body(kWhat, "an event lacks 'Code' or 'NotBefore'");
    }
    if (state != nullptr && *state != "active") continue;  // canceled, completed
    auto when = parse_http_date(*start);
    if (!when.ok()) return when.error().context(kWhat);
    Notice n;
    n.source = "aws";
    n.kind = "maintenance";
    n.deadline = not_before(*when, now);
    n.detail = std::string(*code) + " not before " + std::string(*start);
    if (description != nullptr && !description->empty())
      n.detail += ": " + std::string(*description);
    n.event_id = id != nullptr ? std::string(*id) : std::string(*code) + "-" + std::string(*start);
    n.is_preemption = *code != "system-maintenance";
    notices.push_back(std::move(n));
  }
  return notices;
}

}  // namespace shardguard::agent
