// Internal to the node protocol's two files (node_protocol.cc: envelopes and commands,
// node_protocol_events.cc: events): the strict field reader and the small encoders both use.
#pragma once

#include <boost/json.hpp>

#include <optional>
#include <string>
#include <string_view>

#include "checkpoint/json_fields.h"
#include "supervisor/node_protocol.h"

namespace shardguard::supervisor::wire::detail {
namespace json = boost::json;
using checkpoint::JsonFields;

inline json::object base(std::string_view type) {
  return json::object{{"v", kNodeProtocolVersion}, {"type", type}};
}

inline Error invalid(const Error& e) { return Error(ErrorCode::kInvalid, e.message()); }

// Fields: read strictly, errors turned into kInvalid (bytes from the network, not storage).
struct Reader {
  JsonFields f;
  Result<std::string> str(std::string_view k) { return wrap(f.string(k)); }
  Result<uint64_t> u64(std::string_view k) { return wrap(f.u64(k)); }
  Result<int64_t> i64(std::string_view k) { return wrap(f.i64(k)); }
  Result<uint32_t> u32(std::string_view k) {
    SG_ASSIGN_OR_RETURN(uint64_t v, u64(k));
    if (v > UINT32_MAX) return Error(ErrorCode::kInvalid, f.path(k) + " out of range");
    return static_cast<uint32_t>(v);
  }
  Result<bool> boolean(std::string_view k) {
    SG_ASSIGN_OR_RETURN(const json::value* v, wrap(f.any(k)));
    if (!v->is_bool()) return Error(ErrorCode::kInvalid, f.path(k) + " must be true or false");
    return v->get_bool();
  }
  Result<int> integer(std::string_view k) {
    SG_ASSIGN_OR_RETURN(int64_t v, i64(k));
    if (v < INT32_MIN || v > INT32_MAX) return Error(ErrorCode::kInvalid, f.path(k) + " out of range");
    return static_cast<int>(v);
  }
  Result<std::optional<uint64_t>> opt_u64(std::string_view k) {
    const json::value* v = f.optional(k);
    if (v == nullptr || v->is_null()) return std::optional<uint64_t>{};
    if (v->is_uint64()) return std::optional<uint64_t>(v->get_uint64());
    if (v->is_int64() && v->get_int64() >= 0) return std::optional<uint64_t>(v->get_int64());
    return Error(ErrorCode::kInvalid, f.path(k) + " must be a non-negative integer or null");
  }
  Status finish() { return wrap_status(f.finish()); }

  template <typename T>
  static Result<T> wrap(Result<T> r) {
    if (!r.ok()) return invalid(r.error());
    return r;
  }
  static Status wrap_status(Status s) {
    if (!s.ok()) return invalid(s.error());
    return s;
  }
};

inline json::value opt(const std::optional<uint64_t>& v) { return v ? json::value(*v) : json::value(nullptr); }

inline std::string_view kind_text(CheckpointKind k) { return checkpoint_kind_name(k); }
inline Result<CheckpointKind> parse_kind(std::string_view s) {
  if (s == "emergency") return CheckpointKind::kEmergency;
  if (s == "periodic") return CheckpointKind::kPeriodic;
  if (s == "advisory") return CheckpointKind::kAdvisory;
  return Error(ErrorCode::kInvalid, "unknown checkpoint kind '" + std::string(s) + "'");
}

// Events as they travel (node_protocol_events.cc).
Result<json::object> encode_event(const Event& e);
Result<Event> decode_event(Reader& r, const std::string& name);

}  // namespace shardguard::supervisor::wire::detail
