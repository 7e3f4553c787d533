// The fleet's own history for one seed: when the machine in each node slot comes up, fails,
// gets a preemption notice and goes away, and when its replacement comes up. It does not
// depend on the job or its policy, so every policy and every interval of a sweep meets the
// same fleet (common random numbers), and it is generated once per seed.
// Thread-safety: plain values; generate_fleet is pure.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/failure_table.h"

namespace shardguard::sim {

struct FleetConfig;

enum class FleetEventKind {
  kUp,       // a machine is ready to join (slot's first, or a replacement)
  kFailure,  // a failure of `cause` on the machine; hardware ones take it away
  kNotice,   // the machine will be preempted at `deadline`
  kGone,     // the machine was preempted (or reclaimed by the availability trace)
};

struct FleetEvent {
  double time = 0;
  FleetEventKind kind = FleetEventKind::kUp;
  uint32_t slot = 0;
  uint32_t node = 0;    // the machine's NodeId: slot + slots x generation
  int32_t cause = -1;   // kFailure: index into FleetTimeline::causes
  double deadline = 0;  // kNotice
};

struct FleetTimeline {
  uint32_t slots = 0;  // nodes + spares
  std::vector<FailureCause> causes;
  std::vector<FleetEvent> events;  // by time; ties in generation order
  uint32_t slot_of(uint32_t node) const { return node % slots; }
};

// The history of `config`'s fleet over its duration for `seed`.
FleetTimeline generate_fleet(const FleetConfig& config, uint64_t seed);
// A fleet of `slots` machines that never fail and are never preempted (replayed scripts).
FleetTimeline quiet_fleet(uint32_t slots);

}  // namespace shardguard::sim
