#include "hooks/scalars_json.h"

#include <cmath>
#include <string>

namespace shardguard::hooks {
namespace json = boost::json;
namespace {

json::object encode_window(const ScalarWindow& w) {
  json::object o{{"from", w.first_step}, {"to", w.last_step}, {"n", w.count},
                 {"last", w.last},       {"min", w.min},      {"max", w.max}};
  if (w.nonfinite_step) o["nonfinite_at"] = *w.nonfinite_step;
  return o;
}

Result<uint64_t> step_field(const json::object& o, std::string_view key, const std::string& where) {
  auto it = o.find(key);
  if (it == o.end()) return Error(ErrorCode::kInvalid, where + ": missing field '" + std::string(key) + "'");
  const json::value& v = it->value();
  if (v.is_uint64()) return v.get_uint64();
  if (v.is_int64() && v.get_int64() >= 0) return static_cast<uint64_t>(v.get_int64());
  return Error(ErrorCode::kInvalid,
               where + ": field '" + std::string(key) + "' must be a non-negative integer");
}

Result<double> number_field(const json::object& o, std::string_view key, const std::string& where) {
  auto it = o.find(key);
  if (it == o.end()) return Error(ErrorCode::kInvalid, where + ": missing field '" + std::string(key) + "'");
  const json::value& v = it->value();
  double d = 0;
  if (v.is_double()) d = v.get_double();
  else if (v.is_int64()) d = static_cast<double>(v.get_int64());
  else if (v.is_uint64()) d = static_cast<double>(v.get_uint64());
  else return Error(ErrorCode::kInvalid, where + ": field '" + std::string(key) + "' must be a number");
  if (!std::isfinite(d))
    return Error(ErrorCode::kInvalid, where + ": field '" + std::string(key) + "' must be a finite number");
  return d;
}

Result<ScalarWindow> decode_window(const json::value& v, const std::string& where) {
  if (!v.is_object()) return Error(ErrorCode::kInvalid, where + " must be an object");
  const json::object& o = v.get_object();
  for (const auto& kv : o) {
    const std::string_view k = kv.key();
    if (k != "from" && k != "to" && k != "n" && k != "last" && k != "min" && k != "max" &&
        k != "nonfinite_at")
      return Error(ErrorCode::kInvalid, where + ": unknown field '" + std::string(k) + "'");
  }
  ScalarWindow w;
  SG_ASSIGN_OR_RETURN(w.first_step, step_field(o, "from", where));
  SG_ASSIGN_OR_RETURN(w.last_step, step_field(o, "to", where));
  SG_ASSIGN_OR_RETURN(w.count, step_field(o, "n", where));
  SG_ASSIGN_OR_RETURN(w.last, number_field(o, "last", where));
  SG_ASSIGN_OR_RETURN(w.min, number_field(o, "min", where));
  SG_ASSIGN_OR_RETURN(w.max, number_field(o, "max", where));
  if (o.contains("nonfinite_at")) {
    SG_ASSIGN_OR_RETURN(uint64_t at, step_field(o, "nonfinite_at", where));
    w.nonfinite_step = at;
  }
  if (w.first_step > w.last_step) return Error(ErrorCode::kInvalid, where + ": 'from' is after 'to'");
  if (w.nonfinite_step && (*w.nonfinite_step < w.first_step || *w.nonfinite_step > w.last_step))
    return Error(ErrorCode::kInvalid, where + ": 'nonfinite_at' is outside from..to");
  if (w.last_step - w.first_step < UINT64_MAX && w.count > w.last_step - w.first_step + 1)
    return Error(ErrorCode::kInvalid, where + ": 'n' is more than the steps from..to");
  if (w.min > w.max || (w.count > 0 && (w.last < w.min || w.last > w.max)))
    return Error(ErrorCode::kInvalid, where + ": 'last' must lie in min..max");
  if (w.count == 0 && !w.nonfinite_step)
    return Error(ErrorCode::kInvalid, where + ": an empty window (n 0, no nonfinite_at)");
  return w;
}

}  // namespace

json::object encode_scalars(const StepScalars& s) {
  json::object o;
  if (s.loss) o["loss"] = encode_window(*s.loss);
  if (s.grad_norm) o["grad_norm"] = encode_window(*s.grad_norm);
  return o;
}

Result<StepScalars> decode_scalars(const json::value& v, std::string_view where) {
  const std::string at(where);
  if (!v.is_object()) return Error(ErrorCode::kInvalid, at + ": field 'scalars' must be an object");
  StepScalars s;
  for (const auto& kv : v.get_object()) {
    const std::string name(kv.key());
    auto* slot = s.find(name);
    if (slot == nullptr)
      return Error(ErrorCode::kInvalid, at + ": unknown scalar '" + name + "' (known: loss, grad_norm)");
    SG_ASSIGN_OR_RETURN(ScalarWindow w, decode_window(kv.value(), at + " scalars." + name));
    *slot = w;
  }
  return s;
}

}  // namespace shardguard::hooks
