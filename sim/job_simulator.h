// One simulated run of one job: the real AttemptMachine (supervisor/attempt_machine.h, not a
// copy) driven in simulated time by a model of the nodes. The simulator plays the nodes: it
// answers FindResume from its model of committed checkpoints, turns Launch into NodeLaunched
// and ready ranks after the launch, rendezvous and load costs, CheckpointNow into a commit
// after the save cost, TearDown into NodeStopped after the kill time, and the fleet's failures
// and preemptions (sim/fleet_timeline.h) into RankExited, NodeLost, Notice and NodeJoined. Time
// jumps from event to event (its own queue and the machine's timers); heartbeats go in their
// node-level form (Heartbeats{all_ranks_at}) only when the machine needs them: before its hang
// check fires, and before events whose handling reads the step (a notice, a failure, a
// periodic request). When the machine finishes (exit 75: requeue me), the simulator plays the
// scheduler: after the requeue delay a new `shardguard run` (a new machine) starts with the
// next epoch, on the nodes the fleet has then.
// Thread-safety: simulate_run is reentrant; runs share nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "policies/goodput.h"
#include "sim/fleet_config.h"
#include "sim/fleet_timeline.h"
#include "supervisor/attempt_machine.h"

namespace shardguard::sim {

// A disruption replayed at a moment tied to the job's own progress, as a test harness applies
// it to a real `shardguard run`: `after` seconds past the anchor in an attempt newer than the
// one the previous disruption hit.
struct ScriptedDisruption {
  enum class Anchor { kReady, kCommit };  // ranks ready; a periodic commit
  enum class Action { kKill, kNotice };   // SIGKILL of a rank; a stop notice (SIGTERM)
  Anchor anchor = Anchor::kReady;
  double after = 0;
  Action action = Action::kKill;
  uint32_t rank = 0;  // kKill
  double lead = 30;   // kNotice: its deadline is this far ahead
};

struct DisruptionOutcome {
  double at = -1;  // simulated time it was applied (-1: never)
  supervisor::Epoch epoch = 0;
  uint64_t lost_steps = 0;  // the machine's own count for that attempt (attempt_end)
  double downtime = -1;     // until the next attempt's ranks were ready (-1: not yet)
};

// A line of the machine's timeline, with the simulated time it was written at.
struct TimedRecord {
  double time = 0;
  supervisor::command::Record record;
};

struct SimOptions {
  bool keep_records = false;  // keep every Record the machine emits
  std::vector<ScriptedDisruption> script;
};

struct RunResult {
  policies::GoodputTotals goodput;
  double lost_steps = 0;      // work redone after resumes, in steps
  double final_step = 0;      // progress at the end
  uint64_t failures_hit = 0;  // failures on a node running the job's ranks
  uint64_t preemptions = 0;   // the job's nodes taken by the cloud
  uint64_t notices = 0;       // notices given to the supervisor
  uint64_t emergency_commits = 0;
  uint64_t checkpoints = 0;                    // commits
  uint64_t attempts = 0;                       // launches
  uint64_t machines = 0;                       // `shardguard run`s: the first and every requeue
  uint64_t give_ups = 0;                       // exits 76
  uint64_t machine_events = 0;                 // events fed to the AttemptMachine
  uint64_t heartbeats = 0;                     // of those, node-level Heartbeats
  uint64_t sim_events = 0;                     // the simulator's own queue, fleet events and timers
  std::vector<TimedRecord> records;            // keep_records only
  std::vector<DisruptionOutcome> disruptions;  // one per scripted disruption
};

// The decision core's settings for `policy` on `config`'s job, as `shardguard run` would set
// them (with drain_wait standing in for the ranks' own exit after an emergency commit).
supervisor::MachineConfig machine_config_for(const FleetConfig& config, const Policy& policy);

// Simulates `config.duration` seconds of the job under `policy` on `fleet`; `seed` drives the
// supervisor's backoff jitter only (the fleet carries the rest).
RunResult simulate_run(const FleetConfig& config, const Policy& policy, const FleetTimeline& fleet,
                       uint64_t seed, const SimOptions& options = {});

}  // namespace shardguard::sim
