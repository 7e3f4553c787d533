// Internal to the job simulator: its state, shared by job_sim.cc (the loop, the machine's
// commands, the scheduler, the fleet's events) and job_sim_attempt.cc (one attempt's ranks:
// launch, progress, saves, teardown) and job_sim_script.cc (replayed disruptions).
#pragma once

#include <array>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <queue>
#include <vector>

#include "sim/goodput_ledger.h"
#include "sim/job_simulator.h"
#include "sim/random_streams.h"

namespace shardguard::sim {

using namespace supervisor;

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// The simulator's own future events.
enum class SimKind {
  kNodesLaunched,  // every node of the attempt started its ranks
  kReady,          // ranks loaded and in their collectives: training starts
  kProgress,       // the ranks reach the step of the next save
  kStallEnd,       // the loop may run again after a snapshot
  kCommit,         // a save is durable: the ranks go on
  kCommitSeen,     // the supervisor read the manifest back
  kNodesStopped,   // every node of the attempt confirmed its teardown
  kResume,         // the answer to FindResume
  kNodeLost,       // the supervisor notices a dead node
  kMachineStart,   // the scheduler starts `shardguard run` again
  kScript,         // a replayed disruption is due
  kSurvivorStep,   // independent ranks report the step they were in when one died
};

struct SimEvent {
  double t;
  uint64_t seq;
  SimKind kind;
  Epoch epoch;   // the attempt it belongs to
  uint64_t gen;  // the attempt's generation when scheduled (progress events), or a node id
  uint64_t arg;  // a step, a script index
};
struct LaterEvent {
  bool operator()(const SimEvent& a, const SimEvent& b) const {
    return a.t > b.t || (a.t == b.t && a.seq > b.seq);
  }
};

// One attempt's ranks, as the nodes would see them.
struct AttemptModel {
  Epoch epoch = 0;
  std::vector<NodeId> nodes;  // the layout, node rank order
  uint32_t n = 0;
  uint64_t resume = 0;
  double step_s = 0;     // seconds per step on n nodes
  bool ready = false;    // training has begun
  bool stopped = false;  // torn down: nothing runs any more
  bool dead = false;     // a rank or node died: the rest block in collectives
  bool hung = false;     // ranks alive but stuck: no progress, no heartbeats
  bool exiting = false;  // emergency checkpoint committed: ranks are leaving
  bool stalled = false;  // the loop is stopped for a save
  double work = 0;       // steps done (fractional) at `work_t`
  double work_t = 0;
  uint64_t gen = 0;       // bumped when scheduled progress events become stale
  uint64_t last_fed = 0;  // the step last reported in a heartbeat
  // The clients' own last heartbeat (they send one after a step, at most once per
  // heartbeat_interval): what the supervisor has heard.
  double hb_time = 0;
  uint64_t hb_step = 0;
  // Saves.
  std::optional<uint64_t> request;  // at_step asked by the machine
  CheckpointKind request_kind = CheckpointKind::kPeriodic;
  uint64_t next_every = 0;         // next step of the clients' own schedule (0: none)
  std::optional<uint64_t> saving;  // step of the save in flight (snapshot or write)
  bool saving_emergency = false;
  double write_done = -1;          // when the write in flight commits
  bool waiting_for_write = false;  // due to save while the previous write runs
  uint64_t waiting_step = 0;
  bool waiting_emergency = false;

  bool running() const { return ready && !stopped && !dead && !hung && !exiting; }
  bool progressing() const { return running() && !stalled; }
  double progress(double t) const { return progressing() ? work + (t - work_t) / step_s : work; }
};

struct PoolSlot {
  NodeId node = 0;
  bool alive = false;
  bool leaving = false;  // noticed: will be taken at its deadline
  bool member = false;   // joined to the current machine (as `member_node`)
  NodeId member_node = 0;
};

class JobSim {
 public:
  JobSim(const FleetConfig& c, const Policy& p, const FleetTimeline& fleet, uint64_t seed,
         const SimOptions& options);
  RunResult run();

  // --- job_sim.cc: the loop, the machine, the scheduler, the fleet -----------------------
  void account(double until);
  Activity activity() const;
  Now now() const;
  double at(SteadyTime t) const;
  void schedule(double t, SimKind kind, Epoch epoch = 0, uint64_t gen = 0, uint64_t arg = 0);
  void feed(const Event& e);
  void execute(const Commands& commands);
  void start_machine();
  void fire_timer(TimerId id);
  void on_sim_event(const SimEvent& e);
  void on_fleet_event(const FleetEvent& e);
  void on_failure(const FleetEvent& e);
  void on_finish(const command::Finish& f);
  void node_gone(NodeId node);
  void join(uint32_t slot);
  PoolSlot* slot_of(NodeId node);
  uint32_t alive_nodes() const;
  bool machine_live() const { return machine_ && !machine_->finished(); }
  void on_record(const command::Record& r);

  // --- job_sim_attempt.cc: one attempt's ranks -------------------------------------------
  AttemptModel* current(Epoch e);
  bool in_attempt(NodeId node) const;
  uint32_t first_rank(NodeId node) const;
  void on_launch(const command::Launch& l);
  void on_nodes_launched(Epoch e);
  void on_ready(Epoch e);
  void freeze();
  void set_stalled(bool stalled);
  void reschedule();
  void on_progress(Epoch e, uint64_t gen, uint64_t step);
  void begin_save(uint64_t step);
  void on_stall_end(Epoch e, uint64_t step);
  void on_commit(Epoch e, uint64_t step);
  void on_commit_seen(Epoch e, uint64_t step, bool emergency);
  void start_save(uint64_t step, bool emergency);
  void on_checkpoint_now(const command::CheckpointNow& c);
  void on_teardown(const command::TearDown& t);
  void on_nodes_stopped(Epoch e);
  void on_resume(Epoch e);
  void heartbeat(bool always);
  void rank_died();
  std::pair<uint64_t, double> client_heartbeat(const AttemptModel& a, double t) const;

  // --- job_sim_script.cc: replayed disruptions --------------------------------------------
  void script_anchor(ScriptedDisruption::Anchor anchor);
  void script_apply(uint64_t index);
  void script_ready();

  const FleetConfig& c_;
  const Policy& policy_;
  const FleetTimeline& fleet_;
  const SimOptions& options_;
  MachineConfig mcfg_;
  Stream jitter_;
  uint32_t gpus_ = 1;  // per node

  double t_ = 0;
  uint64_t seq_ = 0;
  std::priority_queue<SimEvent, std::vector<SimEvent>, LaterEvent> queue_;
  std::array<double, kTimerCount> timers_;

  std::unique_ptr<AttemptMachine> machine_;
  Epoch next_epoch_ = 0;
  std::deque<Event> pending_;
  bool feeding_ = false;
  std::vector<uint64_t> skip_steps_;

  std::vector<PoolSlot> pool_;
  uint32_t alive_count_ = 0;
  std::optional<AttemptModel> attempt_;
  std::vector<uint64_t> committed_;  // the checkpoint directory: committed steps, ascending
  double high_water_ = 0;            // progress counted productive so far (steps)
  uint64_t notice_ids_ = 0;

  // Replayed disruptions.
  size_t script_next_ = 0;
  bool script_armed_ = false;
  std::optional<Epoch> script_last_epoch_;

  GoodputLedger ledger_;
  RunResult result_;
};

}  // namespace shardguard::sim
