#include "sim/calibration.h"

#include <algorithm>
#include <boost/json.hpp>
#include <sstream>

#include "core/open_regular.h"

namespace shardguard::sim {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double bandwidth(double per_node, uint32_t nodes, double aggregate) {
  const double total = per_node * std::max<uint32_t>(nodes, 1);
  return aggregate > 0 ? std::min(total, aggregate) : total;
}

}  // namespace

double save_seconds(const Calibration& c, uint32_t nodes) {
  if (c.save_seconds) return *c.save_seconds;
  return c.state_bytes / bandwidth(c.save_per_node, nodes, c.aggregate_write) + c.commit_seconds;
}

double stall_seconds(const Calibration& c, uint32_t nodes, uint32_t gpus_per_node) {
  if (c.stall_seconds) return *c.stall_seconds;
  if (!c.async_save) return save_seconds(c, nodes);
  // Every rank copies its own slice at once: the stall is one rank's share.
  const double ranks = double(std::max<uint32_t>(nodes, 1)) * std::max<uint32_t>(gpus_per_node, 1);
  return c.state_bytes / ranks / kGiB * c.snapshot_seconds_per_gib;
}

double load_seconds(const Calibration& c, uint32_t nodes) {
  if (c.load_seconds) return *c.load_seconds;
  return c.state_bytes / bandwidth(c.load_per_node, nodes, c.aggregate_read);
}

Status parse_calibration_json(std::string_view text, const std::string& source, Calibration& into) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(text, ec);
  if (ec) return Error(ErrorCode::kInvalid, "calibration '" + source + "': " + ec.message());
  if (!v.is_object())
    return Error(ErrorCode::kInvalid, "calibration '" + source + "': expected a JSON object");
  Calibration c = into;
  const auto& obj = v.as_object();
  // Each known figure must be a positive number; a wrong one is named, never guessed around.
  auto number = [&](const char* key, double& out, double scale, bool allow_zero) -> Status {
    auto it = obj.find(key);
    if (it == obj.end()) return ok_status();
    const auto& n = it->value();
    if (!n.is_number())
      return Error(ErrorCode::kInvalid,
                   "calibration '" + source + "': " + key + ": expected a number");
    const double x = n.to_number<double>();
    if (!(x > 0 || (allow_zero && x == 0)))
      return Error(ErrorCode::kInvalid, "calibration '" + source + "': " + key + ": must be " +
                                            (allow_zero ? "0 or more" : "positive") + ", got " +
                                            boost::json::serialize(n));
    out = x * scale;
    return ok_status();
  };
  SG_RETURN_IF_ERROR(number("state_bytes", c.state_bytes, 1, false));
  SG_RETURN_IF_ERROR(number("save_gbps_per_node", c.save_per_node, 1e9, false));
  SG_RETURN_IF_ERROR(number("load_gbps_per_node", c.load_per_node, 1e9, false));
  SG_RETURN_IF_ERROR(number("snapshot_seconds_per_gib", c.snapshot_seconds_per_gib, 1, true));
  SG_RETURN_IF_ERROR(number("commit_seconds", c.commit_seconds, 1, true));
  into = c;
  return ok_status();
}

Status read_calibration_json(const std::string& path, Calibration& into) {
  SG_ASSIGN_OR_RETURN(
      const std::string text,
      read_regular_file(path, size_t{1} << 20, "the calibration", LinkPolicy::kFollow));
  return parse_calibration_json(text, path, into);
}

}  // namespace shardguard::sim
