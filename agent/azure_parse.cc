#include "agent/azure_parse.h"

#include <boost/json.hpp>
#include <cctype>

#include "core/time_formats.h"

namespace shardguard::agent {

namespace json = boost::json;

namespace {

std::string string_or_empty(const json::object& obj, std::string_view key) {
  const json::value* v = obj.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->get_string()) : std::string();
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

struct TypeInfo {
  std::string_view type, kind;
  bool is_preemption;
};
constexpr TypeInfo kTypes[] =
    {
        {"Preempt", "preempted", true}, {"Terminate", "terminate", true},
        {"Reboot", "reboot", true},     {"Redeploy", "redeploy", true},
        {"Freeze", "freeze", false},  // a pause of seconds; memory is kept
};

}  // namespace

Result<AzureDocument> parse_azure_document(std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) return Error(ErrorCode::kCorrupt, "scheduledevents: bad JSON: " + ec.message());
  const json::object* obj = v.if_object();
  const json::value* events = obj != nullptr ? obj->if_contains("Events") : nullptr;
  if (events == nullptr || !events->is_array()) {
    return Error(ErrorCode::kCorrupt, "scheduledevents: no 'Events' array");
  }
  AzureDocument doc;
  if (const json::value* inc = obj->if_contains("DocumentIncarnation"); inc && inc->is_int64()) {
    doc.incarnation = inc->get_int64();
  }
  for (const json::value& e : events->get_array()) {
    const json::object* eo = e.if_object();
    const json::value* resources = eo != nullptr ? eo->if_contains("Resources") : nullptr;
    if (eo == nullptr || resources == nullptr || !resources->is_array()) {
      ++doc.malformed_events;
      continue;
    }
    AzureEvent event;
    event.id = string_or_empty(*eo, "EventId");
    event.type = string_or_empty(*eo, "EventType");
    event.status = string_or_empty(*eo, "EventStatus");
    event.not_before = string_or_empty(*eo, "NotBefore");
    event.description = string_or_empty(*eo, "Description");
    for (const json::value& r : resources->get_array()) {
      if (r.is_string()) event.resources.emplace_back(r.get_string());
    }
    if (event.id.empty() || event.type.empty()) {
      ++doc.malformed_events;
      continue;
    }
    doc.events.push_back(std::move(event));
  }
  return doc;
}

Result<std::optional<Notice>> azure_notice(const AzureEvent& event, std::string_view vm_name,
                                           WallTime now) {
  bool mine = false;
  for (const auto& r : event.resources) mine = mine || iequals(r, vm_name);
  const TypeInfo* info = nullptr;
  for (const auto& t : kTypes) {
    if (t.type == event.type) info = &t;
  }
  if (!mine || info == nullptr) return std::optional<Notice>();
  WallTime deadline = now;
  if (!event.not_before.empty()) {
    auto when = parse_http_date(event.not_before);
    if (!when.ok()) return when.error().context("scheduledevents event " + event.id);
    deadline = not_before(*when, now);
  }
  Notice n;
  n.source = "azure";
  n.kind = std::string(info->kind);
  n.deadline = deadline;
  n.event_id = event.id;
  n.is_preemption = info->is_preemption;
  n.detail = event.type + " " + (event.status.empty() ? "Scheduled" : event.status) +
             (event.not_before.empty() ? "" : " not before " + event.not_before) +
             (event.description.empty() ? "" : ": " + event.description);
  return std::optional<Notice>(std::move(n));
}

std::string azure_start_requests(const std::vector<std::string>& event_ids) {
  json::array requests;
  for (const auto& id : event_ids) requests.push_back(json::object{{"EventId", id}});
  return json::serialize(json::object{{"StartRequests", std::move(requests)}});
}

}  // namespace shardguard::agent
