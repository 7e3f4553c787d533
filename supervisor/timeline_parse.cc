// events.jsonl lines into TimelineRecords, and the typed getters over their fields. Every
// line may be torn (a crash mid-write) or hand-edited: nothing here throws or trusts a type.
#include <boost/json.hpp>
#include <charconv>
#include <cmath>
#include <limits>

#include "supervisor/timeline.h"
#include "supervisor/timeline_text.h"

namespace shardguard::supervisor {
namespace json = boost::json;
namespace {

std::optional<double> parse_double(std::string_view s) {
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v))
    return std::nullopt;
  return v;
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<int64_t> integer_time(const json::value& v) {
  if (v.is_int64()) return v.get_int64();
  if (v.is_uint64() && v.get_uint64() <= uint64_t(std::numeric_limits<int64_t>::max()))
    return static_cast<int64_t>(v.get_uint64());
  return std::nullopt;
}

}  // namespace

const EventValue* TimelineRecord::find(std::string_view key) const {
  // The last of repeated keys wins, as in the JSON object.
  for (auto it = fields.rbegin(); it != fields.rend(); ++it)
    if (it->key == key) return &it->value;
  return nullptr;
}

std::optional<double> TimelineRecord::number(std::string_view key) const {
  const EventValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (const auto* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
  if (const auto* u = std::get_if<uint64_t>(v)) return static_cast<double>(*u);
  if (const auto* d = std::get_if<double>(v))
    return std::isfinite(*d) ? std::optional<double>(*d) : std::nullopt;
  if (const auto* s = std::get_if<std::string>(v)) return parse_double(*s);
  return std::nullopt;
}

std::optional<uint64_t> TimelineRecord::count(std::string_view key) const {
  const EventValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (const auto* i = std::get_if<int64_t>(v))
    return *i >= 0 ? std::optional<uint64_t>(static_cast<uint64_t>(*i)) : std::nullopt;
  if (const auto* u = std::get_if<uint64_t>(v)) return *u;
  if (const auto* s = std::get_if<std::string>(v))
    if (auto n = parse_u64(*s)) return n;
  const std::optional<double> d = number(key);
  // 2^64 is exactly representable; anything at or above it does not fit.
  if (!d || *d < 0 || *d >= 18446744073709551616.0 || std::floor(*d) != *d) return std::nullopt;
  return static_cast<uint64_t>(*d);
}

std::optional<bool> TimelineRecord::flag(std::string_view key) const {
  const EventValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (const auto* b = std::get_if<bool>(v)) return *b;
  if (const auto* s = std::get_if<std::string>(v)) {
    if (*s == "true") return true;
    if (*s == "false") return false;
  }
  return std::nullopt;
}

std::string TimelineRecord::text(std::string_view key) const {
  const EventValue* v = find(key);
  if (v == nullptr) return "";
  if (const auto* s = std::get_if<std::string>(v)) return *s;
  if (const auto* i = std::get_if<int64_t>(v)) return std::to_string(*i);
  if (const auto* u = std::get_if<uint64_t>(v)) return std::to_string(*u);
  if (const auto* d = std::get_if<double>(v)) return plain_number(*d);
  if (const auto* b = std::get_if<bool>(v)) return *b ? "true" : "false";
  return "";
}

std::optional<TimelineRecord> parse_timeline_line(std::string_view line) {
  boost::system::error_code ec;
  json::value v = json::parse(line, ec);
  if (ec || !v.is_object()) return std::nullopt;
  const json::object& o = v.get_object();
  TimelineRecord r;
  bool have_time = false, have_type = false;
  for (const auto& kv : o) {
    const json::value& val = kv.value();
    if (kv.key() == "time_unix_ms") {
      const auto t = integer_time(val);
      if (!t) return std::nullopt;
      r.time_unix_ms = *t;
      have_time = true;
      continue;
    }
    if (kv.key() == "event") {
      if (!val.is_string() || val.get_string().empty()) return std::nullopt;
      r.type = std::string(val.get_string());
      have_type = true;
      continue;
    }
    EventValue field;
    if (val.is_string()) {
      field = std::string(val.get_string());
    } else if (val.is_int64()) {
      field = val.get_int64();
    } else if (val.is_uint64()) {
      field = val.get_uint64();
    } else if (val.is_double()) {
      field = val.get_double();
    } else if (val.is_bool()) {
      field = val.get_bool();
    } else {
      field = json::serialize(val);  // null, arrays, objects: kept as text
    }
    r.fields.push_back({std::string(kv.key()), std::move(field)});
  }
  if (!have_time || !have_type) return std::nullopt;
  return r;
}

}  // namespace shardguard::supervisor
