// Internal to the AttemptMachine: its state, shared by the .cc files that implement it
// (attempt_machine.cc: nodes and attempts; machine_checkpoints.cc: checkpoint requests,
// commits and emergencies; machine_health.cc: hangs and timers).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "policies/checkpoint_interval.h"
#include "policies/exit_class.h"
#include "supervisor/attempt_machine.h"

namespace shardguard::supervisor {

struct RankView {
  bool hello = false;
  int64_t pid = 0;
  bool heartbeated = false;
  uint64_t step = 0;
  SteadyTime last_heartbeat{};
  std::optional<uint64_t> saving;  // step of a save begun and not yet over
  std::optional<event::RankExited> exit;
};

struct NodeMember {
  NodeId node = 0;
  std::string address;
  bool alive = true;
  bool leaving = false;  // notified of its own preemption: not placed in later epochs
};

// One epoch of the job: from FindResume to the last node's NodeStopped.
struct AttemptState {
  Epoch epoch = 0;
  SteadyTime start{};
  bool launched = false;  // the Launch command went out
  std::vector<NodeSlot> layout;
  uint32_t world_size = 0;
  std::optional<uint64_t> resume_step;
  std::string resume_manifest;
  std::string master_addr;
  uint16_t master_port = 0;
  std::vector<RankView> ranks;  // index = global rank
  std::set<NodeId> nodes_launched, nodes_stopped;
  bool tearing_down = false;
  bool hang_detected = false;
  bool node_lost = false;
  bool resize = false;
  bool save_out_of_space = false;
  bool resume_failed = false;
  std::map<uint64_t, std::set<uint32_t>> written;  // by step: ranks whose part is durable
  std::optional<policies::Anomaly> divergence;  // the guard stopped this attempt
  std::optional<std::string> launch_error;  // the command cannot start: give up
  std::optional<event::Abort> abort;        // the job cannot go on here: end after teardown
  std::optional<uint64_t> committed;  // newest step committed in this attempt
  std::optional<uint64_t> first_step;
  SteadyTime first_step_time{};
  uint64_t max_step = 0;
  bool ranks_ready = false;
  std::vector<policies::RankExit> exits;  // ranks that ended on their own, in order
};

// A checkpoint request in flight (emergency, periodic or advisory).
struct PendingRequest {
  CheckpointKind kind = CheckpointKind::kPeriodic;
  uint64_t at_step = 0;
  WallTime deadline{};
  std::string reason;
};

struct EmergencyState {
  std::string reason;
  NodeId node = 0;
  std::set<NodeId> nodes;       // every node that sent a stop notice
  WallTime deadline{};          // the earliest of all notices
  bool preemption = true;
  std::vector<uint64_t> notice_ids;  // acknowledged once the checkpoint commits
  std::optional<uint64_t> committed_step;
  std::string failure;          // why the emergency checkpoint did not commit, when known
  bool requested = false;       // checkpoint_now went out in this attempt
  // The notices taken (detail: the reason), for the coordinator's record: a successor takes
  // them again.
  std::vector<event::Notice> notices;
};

// The divergence guard's memory across attempts (machine_guard.cc).
struct GuardState {
  // Rollbacks since a checkpoint last committed past an anomaly; at options.rollbacks the next
  // anomaly gives up.
  uint32_t rollbacks = 0;
  uint64_t last_anomaly_step = 0;
  uint64_t suspect_from = 0;          // the last anomaly's suspect range starts here
  std::optional<uint64_t> skip_from;  // the next FindResume skips steps >= this
  bool rolled_back = false;           // rollback_to is the checkpoint the last rollback chose
  std::optional<uint64_t> rollback_to;
  bool choosing = false;              // the next ResumeFound is that choice
  bool gave_up = false;
  std::vector<std::string> history;   // one line per anomaly, for the give-up report
};

struct AttemptMachine::Impl {
  MachineConfig cfg;
  policies::RestartPolicy policy;
  policies::ExponentialBackoff backoff;
  policies::CheckpointCostEstimator cost;
  double save_window_warned = 0;  // the fraction last warned about (warn again at 1.25x)
  double save_window_fraction = 0;  // of the last save checked
  Duration seeded_save{0};          // seed_save_time(): checked at start
  policies::FailureRateEstimator failure_rate;
  policies::DivergenceGuard guard;
  GuardState guard_state;

  Phase phase = Phase::kPending;
  bool finished = false;
  int exit_code = 0;
  Epoch epoch = 0;
  SteadyTime job_start{};
  std::vector<NodeMember> members;  // join order
  std::optional<AttemptState> attempt;
  std::optional<PendingRequest> request;
  std::optional<EmergencyState> emergency;
  std::vector<uint64_t> skip_steps;  // checkpoints not to resume from (no progress)
  bool node_unhealthy = false;
  // Repeated SIGTERM/SIGINT: counted when at least 1 s apart (srun forwards a signal that
  // Slurm also sends directly).
  uint32_t stop_signals = 0;
  SteadyTime last_stop_signal{};
  std::map<uint64_t, SteadyTime> save_begin;
  std::set<TimerId> armed;

  // Stats.
  uint64_t last_committed = 0;
  bool any_committed = false;
  uint64_t lost_steps = 0;
  uint64_t last_attempt_lost = 0;  // steps lost by the attempt that ended last
  uint64_t checkpoints = 0;
  double checkpoint_seconds = 0;
  std::map<std::string, uint64_t> restarts;
  Duration running_time{};

  Commands out;  // filled by the handlers of one call

  Impl(MachineConfig c, std::function<double()> uniform01)
      : cfg(std::move(c)),
        policy(cfg.restart),
        backoff(cfg.backoff, std::move(uniform01)),
        guard(cfg.guard) {}

  // --- output helpers -------------------------------------------------------------------
  // At start (`when` "start", an earlier save's time) and after a commit ("commit"): does a
  // save of this length fit the shortest notice? Warns once, and again only when saves grow
  // by a quarter, so a slow disk does not fill the log.
  void check_save_window(Duration took, std::string_view when);

  void record(std::string type, EventFields fields) {
    out.push_back(command::Record{std::move(type), std::move(fields)});
  }
  void hook(std::string event, std::map<std::string, std::string> fields) {
    out.push_back(command::Hook{std::move(event), std::move(fields)});
  }
  void arm(TimerId id, SteadyTime at) {
    armed.insert(id);
    out.push_back(command::ArmTimer{id, at});
  }
  void cancel(TimerId id) {
    if (armed.erase(id) != 0) out.push_back(command::CancelTimer{id});
  }

  // --- attempt_machine.cc ---------------------------------------------------------------
  void on(Now, const event::NodeJoined&);
  void on(Now, const event::NodeLost&);
  void on(Now, const event::ResumeFound&);
  void on(Now, const event::NodeLaunched&);
  void on(Now, const event::LaunchFailed&);
  void on(Now, const event::RankHello&);
  void on(Now, const event::RankExited&);
  void on(Now, const event::NodeStopped&);
  void on(Now, const event::Abort&);
  // A node of the current layout that is known gone without a NodeLost of its own.
  void lose_placed_node(Now now, NodeId node, const std::string& why);
  void maybe_begin(Now now);
  void begin_attempt(Now now);
  void begin_teardown(Now now, const std::string& why);
  void attempt_ended(Now now);
  void relaunch_after(Now now, policies::ExitClass cls, const std::string& why,
                      const std::string& detail, const AttemptState& ended);
  void finish(Now now, command::FinalState state, int code, const std::string& summary);
  std::vector<NodeId> placeable_nodes() const;
  uint32_t alive_members() const;
  bool in_current_attempt(Epoch e) const;
  bool all_ranks_exited() const;

  // --- machine_checkpoints.cc -----------------------------------------------------------
  void on(Now, const event::Heartbeats&);
  void on(Now, const event::SaveBegan&);
  void on(Now, const event::ShardWritten&);
  void on(Now, const event::Committed&);
  void on(Now, const event::SaveFailed&);
  void on(Now, const event::Passed&);
  void on(Now, const event::ResumeFailed&);
  void on(Now, const event::Notice&);
  void on(Now, const event::NodeUnhealthy&);
  void request_checkpoint(Now now, CheckpointKind kind, const std::string& reason,
                          WallTime deadline);
  void issue(Now now, const std::string& note);
  void start_emergency(Now now, const event::Notice& n);
  void arm_deadline(Now now);
  void emergency_committed(Now now, uint64_t step);
  std::string emergency_summary() const;
  // Who had not done their part of saving `step` in this attempt, for a save that did not
  // finish: the ranks whose part is not written yet, or the commit when every part is.
  std::string unfinished_part(uint64_t step) const;
  void adopt_notices(Now now, const std::vector<event::Notice>& notices);
  uint64_t margin(Now now) const;
  uint64_t known_max_step() const;

  // --- machine_guard.cc -----------------------------------------------------------------
  // A heartbeat's scalars: an anomaly stops the attempt (rollback, or give up).
  void check_scalars(Now now, uint32_t rank, const StepScalars& scalars);
  void diverged(Now now, const policies::Anomaly& anomaly);
  // A commit while the guard is involved: set aside when suspect; progress past the last
  // anomaly starts the rollback count again.
  // True when the commit is suspect (set aside).
  bool guard_committed(const event::Committed& e);
  // FindResume's skip_from, and the Launch's skip_batches for the checkpoint found.
  std::optional<uint64_t> guard_skip_from() const { return guard_state.skip_from; }
  uint64_t guard_resume_found(Epoch epoch, std::optional<uint64_t> step);
  // The attempt the guard stopped is over: relaunch from before the anomaly, or give up.
  void guard_attempt_ended(Now now, const AttemptState& ended, const std::string& detail);

  // --- machine_health.cc ----------------------------------------------------------------
  void on(Now, const event::TimerFired&);
  void arm_health(Now now);
  void check_health(Now now);
  void arm_periodic(Now now);
  Duration periodic_interval(Now now) const;
};

// Saturating addition: a hostile or buggy step near 2^64 must never wrap at_step to 0.
inline uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

std::string seconds_text(Duration d);
double to_seconds(Duration d);

}  // namespace shardguard::supervisor
