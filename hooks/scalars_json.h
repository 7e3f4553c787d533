// The JSON form of a heartbeat's scalar windows (core/scalar_window.h), shared by the control
// protocol (job -> agent) and the node protocol (node -> coordinator):
//   {"loss":{"from":S0,"to":S1,"n":N,"last":X,"min":X,"max":X,"nonfinite_at":S}, "grad_norm":...}
// Decoding is strict: known scalar names and fields only, finite numbers, a consistent window.
// Included only by the two protocol encoders (it brings Boost.JSON). Pure functions.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <string_view>

#include "core/result.h"
#include "core/scalar_window.h"

namespace shardguard::hooks {

boost::json::object encode_scalars(const StepScalars& scalars);
// `where` prefixes errors ("heartbeat", "heartbeats rank 3").
Result<StepScalars> decode_scalars(const boost::json::value& v, std::string_view where);

}  // namespace shardguard::hooks
