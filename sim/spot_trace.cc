#include "sim/spot_trace.h"

#include <boost/json.hpp>
#include <cerrno>
#include <sstream>

#include "core/open_regular.h"

namespace shardguard::sim {

Result<SpotTrace> parse_spot_trace(std::string_view json, const std::string& source) {
  auto bad = [&](const std::string& what) {
    return Error(ErrorCode::kInvalid, "spot trace '" + source + "': " + what);
  };
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(json, ec);
  if (ec) return bad(ec.message());
  if (!v.is_object()) return bad("expected a JSON object");
  const auto& obj = v.as_object();
  const auto* meta = obj.if_contains("metadata");
  if (meta == nullptr || !meta->is_object()) return bad("metadata: expected an object");
  const auto* gap = meta->as_object().if_contains("gap_seconds");
  if (gap == nullptr || !gap->is_number()) return bad("metadata.gap_seconds: expected a number");
  SpotTrace t;
  t.source = source;
  t.gap_seconds = gap->to_number<double>();
  if (!(t.gap_seconds > 0)) return bad("metadata.gap_seconds: must be positive");
  const auto* data = obj.if_contains("data");
  if (data == nullptr || !data->is_array()) return bad("data: expected an array of integers");
  const auto& arr = data->as_array();
  if (arr.empty()) return bad("data: must not be empty");
  t.data.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const auto& x = arr[i];
    if (!x.is_int64() && !x.is_uint64())
      return bad("data[" + std::to_string(i) + "]: expected an integer, got " +
                 boost::json::serialize(x));
    const int64_t n = x.is_int64() ? x.as_int64() : static_cast<int64_t>(x.as_uint64());
    if (n < 0) return bad("data[" + std::to_string(i) + "]: must not be negative");
    t.data.push_back(n);
  }
  return t;
}

Result<SpotTrace> read_spot_trace(const std::string& path) {
  SG_ASSIGN_OR_RETURN(
      const std::string text,
      read_regular_file(path, size_t{64} << 20, "the spot trace", LinkPolicy::kFollow));
  return parse_spot_trace(text, path);
}

}  // namespace shardguard::sim
