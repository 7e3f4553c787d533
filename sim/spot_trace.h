// Spot traces in the shape of skypilot's public spot-traces files:
//   {"metadata": {"gap_seconds": 600, ...}, "data": [0, 1, 0, ...]}
// one integer per tick of `gap_seconds`: preemption traces hold 0 or 1 (1: the instance was
// preempted in that tick), availability traces the number of instances available. This
// machine cannot download them; examples/simulate/traces/ holds small synthetic ones in the
// same shape. Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace shardguard::sim {

struct SpotTrace {
  std::string source;  // file name, for messages
  double gap_seconds = 0;
  std::vector<int64_t> data;
  double length_seconds() const { return gap_seconds * double(data.size()); }
};

// Parses one trace; errors name the file and what is wrong ("data[3]: expected an integer").
Result<SpotTrace> parse_spot_trace(std::string_view json, const std::string& source);
Result<SpotTrace> read_spot_trace(const std::string& path);

}  // namespace shardguard::sim
