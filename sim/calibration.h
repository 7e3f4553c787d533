// What a checkpoint costs in the simulated fleet: the per-node figures the bench measures
// (issue 15's calibration JSON, read here when given), scaled by the state size and by the
// per-node and aggregate storage bandwidth of the fleet. Pure arithmetic; plain values.
//
// The calibration JSON (every key optional; unknown keys are ignored so the bench can add more):
//   {"state_bytes": 980000000000,              total training state of the job
//    "save_gbps_per_node": 5.0,                durable write, GB/s (10^9 bytes) of one node
//    "load_gbps_per_node": 5.0,                cold read, GB/s of one node
//    "snapshot_seconds_per_gib": 0.092,        the async stall: seconds per GiB of one rank's state
//    "commit_seconds": 0.5}                    last shard durable -> manifest committed, read back
#pragma once

#include <optional>
#include <string>

#include "core/result.h"

namespace shardguard::sim {

struct Calibration {
  double state_bytes = 980e9;               // 70B parameters x 14 bytes
  double save_per_node = 5e9;               // bytes/s
  double load_per_node = 5e9;               // bytes/s
  double snapshot_seconds_per_gib = 0.092;  // README bench: 92 ms for 1 GiB
  double commit_seconds = 0.5;
  // Fleet storage, from the fleet TOML rather than the bench.
  double aggregate_write = 100e9;  // bytes/s, all nodes together
  double aggregate_read = 100e9;
  bool async_save = true;  // the loop stalls only for the snapshot
  // Overrides (seconds) for scenarios stated in time rather than bandwidth (Daly's).
  std::optional<double> save_seconds, load_seconds, stall_seconds;
};

// Seconds from the start of a save to its commit on `nodes` nodes of `gpus_per_node` ranks.
double save_seconds(const Calibration& c, uint32_t nodes);
// Seconds the training loop stops for one periodic save (the snapshot, or the whole save
// when saves are synchronous).
double stall_seconds(const Calibration& c, uint32_t nodes, uint32_t gpus_per_node);
// Seconds to read the state back on `nodes` nodes.
double load_seconds(const Calibration& c, uint32_t nodes);

// Reads the bench's calibration JSON over the defaults in `into`. Errors name the file and key.
Status read_calibration_json(const std::string& path, Calibration& into);
Status parse_calibration_json(std::string_view text, const std::string& source, Calibration& into);

}  // namespace shardguard::sim
