// Scenario scripts (JSON) for the metadata emulator, and body placeholder expansion.
#include <boost/json.hpp>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "tests/agent/emulator_state.h"

namespace shardguard::testing {

namespace json = boost::json;

namespace {

Error bad(const std::string& where, const std::string& why) {
  return Error(ErrorCode::kInvalid, "scenario " + where + ": " + why);
}

// Reads optional members of an object with type checks; the first error sticks.
struct Reader {
  const json::object& obj;
  std::string where;
  std::optional<Error> error;

  template <typename T>
  void number(std::string_view key, T& out) {
    const json::value* v = obj.if_contains(key);
    if (v == nullptr || error) return;
    if (!v->is_int64() && !v->is_uint64()) {
      error = bad(where + "." + std::string(key), "not an integer");
      return;
    }
    out = static_cast<T>(v->is_int64() ? v->get_int64() : static_cast<int64_t>(v->get_uint64()));
  }
  void flag(std::string_view key, bool& out) {
    const json::value* v = obj.if_contains(key);
    if (v == nullptr || error) return;
    if (!v->is_bool())
      error = bad(where + "." + std::string(key), "not a boolean");
    else
      out = v->get_bool();
  }
  void text(std::string_view key, std::string& out) {
    const json::value* v = obj.if_contains(key);
    if (v == nullptr || error) return;
    if (!v->is_string())
      error = bad(where + "." + std::string(key), "not a string");
    else
      out = std::string(v->get_string());
  }
};

const json::array* array_at(const json::object& obj, std::string_view key) {
  const json::value* v = obj.if_contains(key);
  return v != nullptr ? v->if_array() : nullptr;
}

}  // namespace

Result<EmulatorScenario> parse_emulator_scenario(std::string_view text) {
  boost::system::error_code ec;
  json::value root = json::parse(text, ec);
  if (ec) return bad("", "bad JSON: " + ec.message());
  if (!root.is_object()) return bad("", "not a JSON object");
  const json::object& obj = root.get_object();
  EmulatorScenario s;
  Reader top{obj, "", {}};
  top.flag("imdsv2_required", s.imdsv2_required);
  top.number("aws_token_lifetime_ms", s.aws_token_lifetime_ms);
  top.number("gcp_max_wait_ms", s.gcp_max_wait_ms);
  top.text("azure_vm_name", s.azure_vm_name);
  if (top.error) return *top.error;
  if (const json::value* role = obj.if_contains("aws_role")) {
    if (!role->is_object()) return bad("aws_role", "not an object");
    Reader r{role->get_object(), "aws_role", {}};
    r.text("name", s.aws_role.name);
    r.text("access_key_id", s.aws_role.access_key_id);
    r.text("secret_access_key", s.aws_role.secret_access_key);
    r.text("token", s.aws_role.token);
    r.number("expires_after_s", s.aws_role.expires_after_s);
    r.flag("rotate", s.aws_role.rotate);
    r.text("code", s.aws_role.code);
    if (r.error) return *r.error;
  }
  if (const json::array* clouds = array_at(obj, "clouds")) {
    s.aws = s.gcp = s.azure = false;
    for (const auto& c : *clouds) {
      if (c == "aws")
        s.aws = true;
      else if (c == "gcp")
        s.gcp = true;
      else if (c == "azure")
        s.azure = true;
      else
        return bad("clouds", "expected aws, gcp or azure");
    }
  }
  if (const json::value* tl = obj.if_contains("timelines")) {
    if (!tl->is_object()) return bad("timelines", "not an object");
    for (const auto& [path, entries] : tl->get_object()) {
      if (!entries.is_array()) return bad("timelines." + std::string(path), "not an array");
      for (const auto& e : entries.get_array()) {
        if (!e.is_object()) return bad("timelines." + std::string(path), "not an object");
        TimedAnswer a;
        Reader r{e.get_object(), "timelines." + std::string(path), {}};
        r.number("at_ms", a.at_ms);
        r.number("status", a.status);
        r.text("body", a.body);
        if (r.error) return *r.error;
        if (const json::value* j = e.get_object().if_contains("json")) a.body = json::serialize(*j);
        s.timelines[std::string(path)].push_back(std::move(a));
      }
    }
  }
  if (const json::array* events = array_at(obj, "azure_events")) {
    for (const auto& e : *events) {
      const json::object* eo = e.if_object();
      const json::value* ev = eo != nullptr ? eo->if_contains("event") : nullptr;
      if (ev == nullptr || !ev->is_object()) return bad("azure_events", "needs an 'event' object");
      AzureEventScript a;
      Reader r{*eo, "azure_events", {}};
      r.number("at_ms", a.at_ms);
      r.number("until_ms", a.until_ms);
      if (r.error) return *r.error;
      a.event_json = json::serialize(*ev);
      s.azure_events.push_back(std::move(a));
    }
  }
  if (const json::array* faults = array_at(obj, "faults")) {
    for (const auto& f : *faults) {
      if (!f.is_object()) return bad("faults", "not an object");
      EmulatorFault fault;
      Reader r{f.get_object(), "faults", {}};
      r.text("method", fault.method);
      r.text("path", fault.path_prefix);
      r.number("from_ms", fault.from_ms);
      r.number("until_ms", fault.until_ms);
      r.number("count", fault.count);
      r.number("status", fault.status);
      r.text("body", fault.body);
      r.number("delay_ms", fault.delay_ms);
      r.flag("hang", fault.hang);
      r.flag("close", fault.close);
      if (r.error) return *r.error;
      s.faults.push_back(std::move(fault));
    }
  }
  return s;
}

std::string expand_placeholders(const std::string& text,
                                std::chrono::system_clock::time_point wall_start, int64_t at_ms) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t open = text.find("${", pos);
    const size_t close = open == std::string::npos ? open : text.find('}', open);
    if (close == std::string::npos) break;
    out += text.substr(pos, open - pos);
    const std::string spec = text.substr(open + 2, close - open - 2);
    const size_t colon = spec.find(':');
    const std::string kind = spec.substr(0, colon);
    const long long offset_s =
        colon == std::string::npos ? 0 : std::strtoll(spec.c_str() + colon + 1, nullptr, 10);
    const auto t = wall_start + std::chrono::milliseconds(at_ms) + std::chrono::seconds(offset_s);
    const std::time_t secs = std::chrono::system_clock::to_time_t(t);
    std::tm tm{};
    ::gmtime_r(&secs, &tm);
    char buf[64] = "";
    if (kind == "rfc3339") {
      std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    } else if (kind == "rfc1123") {
      std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    } else if (kind == "awstime") {
      std::snprintf(buf, sizeof buf, "%d ", tm.tm_mday);
      std::strftime(buf + std::strlen(buf), sizeof buf - std::strlen(buf), "%b %Y %H:%M:%S GMT",
                    &tm);
    } else if (kind == "unix_ms") {
      std::snprintf(
          buf, sizeof buf, "%lld",
          static_cast<long long>(
              std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count()));
    } else {
      out += "${" + spec + "}";  // unknown: left as written
    }
    out += buf;
    pos = close + 1;
  }
  out += text.substr(pos);
  return out;
}

std::optional<TimedAnswer> timeline_answer(const EmulatorState& s, const std::string& path,
                                           int64_t now_ms) {
  auto it = s.scenario.timelines.find(path);
  if (it == s.scenario.timelines.end()) return std::nullopt;
  std::optional<TimedAnswer> best;
  for (const TimedAnswer& a : it->second) {
    if (a.at_ms <= now_ms && (!best || a.at_ms >= best->at_ms)) best = a;
  }
  if (best) best->body = expand_placeholders(best->body, s.wall_start, best->at_ms);
  return best;
}

}  // namespace shardguard::testing
