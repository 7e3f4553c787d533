// AttemptMachine: every decision of the supervisor, and nothing else (DESIGN.md section 6).
// Events in (nodes joining and leaving, ranks starting, heartbeating, saving, exiting, notices,
// timers), commands out (find the resume checkpoint, launch epoch E with this layout, tear
// down, checkpoint_now, arm a timer, record, give up). Time is an argument of every call; it
// does no I/O and reads no clock, so the same machine drives one node, many nodes and the fleet
// simulator, and unit tests drive it with made-up time.
//
// The emergency step is chosen here, once, for every rank of the job: the highest step any rank
// reported plus a margin for the request's delivery; a rank already past it reports `passed`
// and the machine re-issues checkpoint_now with a new at_step for all ranks, so lag never splits
// the emergency step. The earliest deadline of all notices wins.
//
// Thread-safety: none; one machine belongs to one loop.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "policies/backoff.h"
#include "policies/checkpoint_interval.h"
#include "policies/divergence_guard.h"
#include "policies/restart_policy.h"
#include "policies/save_window.h"
#include "supervisor/coordinator_log.h"
#include "supervisor/machine_events.h"

namespace shardguard::supervisor {

using IntervalMode = policies::IntervalMode;

struct MachineConfig {
  // Layout. min_nodes..max_nodes nodes of nproc_per_node ranks each.
  uint32_t nproc_per_node = 1;
  uint32_t min_nodes = 1;
  uint32_t max_nodes = 1;
  // Enough nodes (>= min) are here: wait this long for more (up to max) before launching.
  Duration join_window = std::chrono::seconds(0);
  // Fewer than min_nodes this long: give up with exit 75 so the scheduler requeues the job.
  Duration rendezvous_timeout = std::chrono::minutes(10);
  std::string master_addr = "127.0.0.1";  // used when the node hosting rank 0 gave none
  uint16_t master_port = 29500;           // epoch E uses master_port + E % kMasterPortSpan

  // Restarts.
  policies::RestartPolicyOptions restart{{3, std::chrono::hours(1)},
                                         {3, std::chrono::hours(1)},
                                         {5, std::chrono::hours(1)},
                                         {100, std::chrono::hours(24)},
                                         3,
                                         {3, std::chrono::hours(1)},
                                         {8, std::chrono::hours(1)}};
  policies::BackoffOptions backoff{std::chrono::seconds(1), std::chrono::minutes(5), 2.0, 0.2};
  Duration healthy_after = std::chrono::minutes(10);  // a run this long resets the backoff
  std::vector<int> preemption_exit_codes = {75};

  // Health.
  Duration hang_timeout = std::chrono::minutes(5);     // heartbeat older than this: hang
  Duration startup_timeout = std::chrono::seconds(0);  // 0: no limit before the first
  Duration commit_timeout = std::chrono::minutes(10);  // extra slack while a rank saves
  // A node that does not confirm its ranks are gone this long after a teardown is lost.
  Duration stop_timeout = std::chrono::seconds(30);
  // A coordinator that adopted a running epoch gives its nodes this long to come back.
  Duration rejoin_window = std::chrono::seconds(5);

  // Emergencies.
  // The notice windows a save must fit (policies/save_window.h): a save that takes more than
  // half the shortest one is recorded as "save_window" with a warning, at start (the save time
  // given to seed_save_time) and after each commit.
  policies::SaveWindowInputs save_window;
  Duration safety_margin = std::chrono::seconds(2);  // ranks must be done this long before
  Duration drain_wait = std::chrono::seconds(10);    // ranks' exit after the emergency commit
  // How long a checkpoint request may take to reach every rank (heartbeat age + delivery):
  // at_step leaves room for the steps run meanwhile.
  Duration request_latency = std::chrono::milliseconds(300);

  // Time-based checkpoints (kSteps is the clients' own schedule).
  IntervalMode interval_mode = IntervalMode::kSteps;
  Duration every = std::chrono::minutes(30);  // kTime
  Duration mtbf = std::chrono::hours(4);      // kAuto: prior for the failure rate

  // The divergence guard (machine_guard.cc): loss / grad_norm rules, rollbacks, skipped batches.
  policies::GuardOptions guard;
};

inline constexpr uint16_t kMasterPortSpan = 100;

// Where the machine stands; names are those of `shardguard status`.
enum class Phase {
  kPending,        // waiting for enough nodes
  kLaunching,      // finding the resume checkpoint and starting ranks
  kRunning,
  kCheckpointing,  // an emergency checkpoint is being taken
  kDraining,       // the emergency checkpoint committed; ranks are exiting
  kStopping,       // tearing down an attempt
  kBackoff,
  kSucceeded,
  kFailed,
  kPreempted,
};
std::string_view phase_name(Phase phase);

// Figures for metrics and status.
struct MachineStats {
  Epoch epoch = 0;
  uint64_t last_committed_step = 0;  // 0: none
  bool any_committed = false;
  uint64_t lost_steps = 0;           // counted from the resume step of each attempt
  uint64_t checkpoints = 0;
  double checkpoint_seconds = 0;
  // The emergency save's window (0: none configured) and the last save's share of it (the
  // seeded save time until this run commits one; 0: no save known yet).
  double save_window_seconds = 0;
  double save_window_fraction = 0;
  std::map<std::string, uint64_t> restarts;  // by exit class name
  uint64_t max_step = 0;                     // highest step reported in this attempt
  uint32_t nodes = 0;                        // members now
  uint32_t world_size = 0;                   // of the current attempt
  Duration running_time{};                   // summed over attempts (ranks launched)
};

class AttemptMachine {
 public:
  // `uniform01` is the backoff's jitter source (values in [0, 1]); tests pass a fixed one.
  AttemptMachine(MachineConfig config, std::function<double()> uniform01);
  ~AttemptMachine();
  AttemptMachine(const AttemptMachine&) = delete;
  AttemptMachine& operator=(const AttemptMachine&) = delete;

  // Begins the job; epochs start at `first_epoch` (they keep growing across runs on one
  // checkpoint directory so fencing can tell a zombie of an earlier run). Nodes join by events.
  Commands start(Now now, Epoch first_epoch);
  // Before start(): the no-progress loop breaker's counts from earlier runs on the checkpoint
  // directory (policies::RestartPolicy::seed), so requeues and new runs continue them. The
  // machine reports what to add to them in its "attempt_end" records (resume_step,
  // committed_step, blames_checkpoint) and in "fallback_checkpoint" records (step).
  void seed_loop_breaker(std::map<std::optional<uint64_t>, uint32_t> failed_resumes,
                         std::set<uint64_t> fallback_tried);
  // Before start(): how long the last committed save took (an earlier attempt or run on this
  // run directory). start() checks it against the save window, so a run that will not fit its
  // emergency save warns at start, before its first checkpoint.
  void seed_save_time(Duration last_save);
  // Feeds one event; returns what to do, in order.
  Commands handle(Now now, const Event& event);
  // Instead of start(): a restarted or successor coordinator takes over from the record its
  // predecessor wrote. A running epoch is adopted, not relaunched: its nodes have
  // `rejoin_window` to come back (NodeJoined), the others are lost. Budgets carry over.
  Commands adopt(Now now, const CoordinatorState& state);
  // What a successor needs (job id and coordinator address are the shell's to fill in).
  CoordinatorState snapshot(Now now) const;

  Phase phase() const;
  bool finished() const;
  int exit_code() const;  // valid once finished()
  Epoch epoch() const;
  MachineStats stats(Now now) const;
  const MachineConfig& config() const;
  // Steps a checkpoint request leaves for delivery, from the observed step rate.
  uint64_t step_margin(Now now) const;
  // True when `node`'s ranks of `epoch` are part of the attempt running now (not being torn
  // down, and the node not declared lost): a node rejoining with other ranks must stop them.
  bool runs_on(NodeId node, Epoch epoch) const;
  // The ranks `node` holds in `epoch` when that is the attempt running now: [first, first +
  // count). nullopt when `epoch` is not the current attempt's (the machine ignores its
  // events anyway); {0, 0} when the node holds none of its ranks.
  struct RankSpan {
    uint32_t first = 0, count = 0;
    bool contains(uint32_t rank) const { return rank >= first && rank - first < count; }
  };
  std::optional<RankSpan> ranks_of(NodeId node, Epoch epoch) const;
  // The current attempt's world size (0 when none runs).
  uint32_t world_size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::supervisor
