// The job simulator's loop: the next event is the earliest of its own queue, the fleet's
// history and the machine's timers; time jumps there, the interval before it is booked in the
// goodput ledger, and the event is played. Also the machine's commands, the scheduler that
// restarts `shardguard run` after it exits, and the fleet's events as the nodes report them.
#include <algorithm>
#include <cmath>

#include "core/exit_codes.h"
#include "core/overload.h"
#include "sim/job_sim_impl.h"

namespace shardguard::sim {
namespace {

// Simulated time 0 on both clocks. Steady time starts well above the clock's epoch, as a real
// steady clock does, so that "now - something" never reaches below it.
const SteadyTime kSteadyZero = SteadyTime(std::chrono::hours(1));
const WallTime kWallZero = WallTime(std::chrono::seconds(1'700'000'000));

Duration secs(double s) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

}  // namespace

MachineConfig machine_config_for(const FleetConfig& c, const Policy& p) {
  const RestartSettings& r = c.restart;
  MachineConfig m;
  m.nproc_per_node = c.job.gpus_per_node;
  m.max_nodes = c.job.nodes;
  m.min_nodes = p.min_nodes > 0 ? std::min(p.min_nodes, c.job.nodes) : c.job.nodes;
  m.join_window = Duration{0};
  m.rendezvous_timeout = secs(r.rendezvous_timeout);
  if (r.unlimited_budgets) {
    const policies::Budget big{1'000'000'000u, std::chrono::hours(1)};
    m.restart = {big, big, big, big, r.no_progress_limit, big, big};
  }
  m.restart.no_progress_limit = r.no_progress_limit;
  m.backoff = {secs(r.backoff_initial), secs(r.backoff_max), r.backoff_multiplier,
               r.backoff_jitter};
  m.healthy_after = secs(r.healthy_after);
  m.hang_timeout = secs(r.hang_timeout);
  m.startup_timeout = Duration{0};
  m.stop_timeout = secs(c.costs.teardown + 30);
  m.safety_margin = secs(r.safety_margin);
  m.request_latency = secs(r.request_latency);
  // The machine has no node-level "every rank exited" event (one RankExited per rank would be
  // 1,024 events per notice): the drain timer stands for the ranks' own exit after an
  // emergency commit, and starts the teardown at the same moment.
  m.drain_wait = secs(c.costs.rank_exit);
  m.interval_mode = p.interval;
  m.every = secs(p.every);
  const double mtbf = p.mtbf_prior.value_or(
      job_mtbf_seconds(c.failures, uint64_t(c.job.nodes) * c.job.gpus_per_node));
  m.mtbf = secs(std::min(mtbf, 10 * 365 * 86400.0));
  return m;
}

JobSim::JobSim(const FleetConfig& c, const Policy& p, const FleetTimeline& fleet, uint64_t seed,
               const SimOptions& options)
    : c_(c),
      policy_(p),
      fleet_(fleet),
      options_(options),
      mcfg_(machine_config_for(c, p)),
      jitter_(derive_seed(seed, kJitterStream)),
      gpus_(c.job.gpus_per_node) {
  timers_.fill(kInf);
  pool_.resize(fleet.slots);
}

RunResult JobSim::run() {
  schedule(0, SimKind::kMachineStart);
  size_t fi = 0;
  for (;;) {
    const double tf = fi < fleet_.events.size() ? fleet_.events[fi].time : kInf;
    const double ts = queue_.empty() ? kInf : queue_.top().t;
    const auto timer = std::min_element(timers_.begin(), timers_.end());
    const double tt = *timer;
    const double next = std::min({ts, tf, tt});
    if (next > c_.duration) break;
    account(next);
    t_ = std::max(t_, next);
    ++result_.sim_events;
    if (ts <= tf && ts <= tt) {
      const SimEvent e = queue_.top();
      queue_.pop();
      on_sim_event(e);
    } else if (tf <= tt) {
      on_fleet_event(fleet_.events[fi++]);
    } else {
      fire_timer(static_cast<TimerId>(timer - timers_.begin()));
    }
  }
  account(c_.duration);
  t_ = c_.duration;
  result_.final_step = attempt_ ? std::max(high_water_, attempt_->progress(t_)) : high_water_;
  result_.goodput = ledger_.totals();
  return std::move(result_);
}

// ---- time and accounting ------------------------------------------------------------------

Now JobSim::now() const {
  const auto d = std::chrono::nanoseconds(std::llround(t_ * 1e9));
  return Now{kSteadyZero + d, kWallZero + std::chrono::duration_cast<WallTime::duration>(d)};
}

double JobSim::at(SteadyTime t) const {
  return std::chrono::duration<double>(t - kSteadyZero).count();
}

void JobSim::account(double until) {
  const double dt = until - t_;
  if (dt <= 0) return;
  // A job of fixed size holds all its nodes all the time; an elastic one holds those there
  // are (it counts its smaller size while small).
  const bool elastic = mcfg_.min_nodes < mcfg_.max_nodes;
  const uint32_t held = (elastic ? std::min(c_.job.nodes, alive_nodes()) : c_.job.nodes) * gpus_;
  const bool running = attempt_ && attempt_->running();
  ledger_.add(activity(), dt, running ? attempt_->n * gpus_ : 0, held);
}

Activity JobSim::activity() const {
  if (attempt_ && attempt_->running())
    return attempt_->stalled ? Activity::kCheckpoint : Activity::kTraining;
  if (machine_live() && machine_->phase() == Phase::kPending) return Activity::kWaiting;
  if (!machine_live() && alive_nodes() < mcfg_.min_nodes) return Activity::kWaiting;
  return Activity::kRestart;
}

uint32_t JobSim::alive_nodes() const { return alive_count_; }

void JobSim::schedule(double t, SimKind kind, Epoch epoch, uint64_t gen, uint64_t arg) {
  queue_.push({t, seq_++, kind, epoch, gen, arg});
}

// ---- the machine -----------------------------------------------------------------------

// Events are handled one at a time, as the shell does: one raised while commands run waits.
void JobSim::feed(const Event& e) {
  pending_.push_back(e);
  if (feeding_) return;
  feeding_ = true;
  while (!pending_.empty()) {
    const Event next = std::move(pending_.front());
    pending_.pop_front();
    if (!machine_live()) continue;
    ++result_.machine_events;
    execute(machine_->handle(now(), next));
  }
  feeding_ = false;
}

void JobSim::execute(const Commands& commands) {
  for (const auto& cmd : commands) {
    std::visit(
        Overload{
            [&](const command::FindResume& f) {
              skip_steps_ = f.skip_steps;
              schedule(t_ + c_.costs.resume_scan, SimKind::kResume, f.epoch);
            },
            [&](const command::Launch& l) { on_launch(l); },
            [&](const command::TearDown& td) { on_teardown(td); },
            [&](const command::CheckpointNow& cn) { on_checkpoint_now(cn); },
            [&](const command::ArmTimer& a) {
              timers_[static_cast<size_t>(a.id)] = std::max(t_, at(a.at));
            },
            [&](const command::CancelTimer& x) { timers_[static_cast<size_t>(x.id)] = kInf; },
            [&](const command::Record& r) { on_record(r); },
            [&](const command::Finish& f) { on_finish(f); },
            // Saves never fail here, hang reports and hooks have no cost, notices need no
            // acknowledgement and no checkpoint is corrupt: nothing to play.
            [&](const auto&) {},
        },
        cmd);
  }
}

void JobSim::on_record(const command::Record& r) {
  if (options_.keep_records) result_.records.push_back({t_, r});
  if (r.type != "attempt_end" || result_.disruptions.empty()) return;
  std::optional<uint64_t> epoch, lost;
  for (const auto& f : r.fields) {
    if (const auto* v = std::get_if<uint64_t>(&f.value)) {
      if (f.key == "attempt") epoch = *v;
      if (f.key == "lost_steps") lost = *v;
    }
  }
  for (auto& d : result_.disruptions)
    if (epoch && lost && d.epoch == *epoch) d.lost_steps = *lost;
}

void JobSim::start_machine() {
  machine_ = std::make_unique<AttemptMachine>(mcfg_, [this] { return jitter_.uniform(); });
  ++result_.machines;
  timers_.fill(kInf);
  for (auto& s : pool_) s.member = false;
  execute(machine_->start(now(), next_epoch_));
  for (uint32_t slot = 0; slot < pool_.size(); ++slot)
    if (pool_[slot].alive && !pool_[slot].leaving) join(slot);
}

void JobSim::join(uint32_t slot) {
  PoolSlot& s = pool_[slot];
  s.member = true;
  s.member_node = s.node;
  feed(event::NodeJoined{s.node, "node-" + std::to_string(s.node)});
}

// `shardguard run` ended: as its scheduler, start it again (a requeue after exit 75; an
// operator's restart after it gave up).
void JobSim::on_finish(const command::Finish& f) {
  if (attempt_ && !attempt_->stopped) {
    freeze();
    attempt_->stopped = true;
  }
  if (f.exit_code == kExitGaveUp) ++result_.give_ups;
  next_epoch_ = machine_->epoch() + 1;
  timers_.fill(kInf);
  for (auto& s : pool_) s.member = false;
  const double delay = f.exit_code == kExitPreempted ? c_.costs.requeue : c_.costs.give_up_restart;
  schedule(t_ + delay, SimKind::kMachineStart);
}

void JobSim::fire_timer(TimerId id) {
  timers_[static_cast<size_t>(id)] = kInf;
  // The hang check reads the heartbeats' age; a periodic request reads the step.
  if (id == TimerId::kHealth) heartbeat(true);
  if (id == TimerId::kPeriodic) heartbeat(false);
  feed(event::TimerFired{id});
}

void JobSim::on_sim_event(const SimEvent& e) {
  switch (e.kind) {
    case SimKind::kNodesLaunched:
      return on_nodes_launched(e.epoch);
    case SimKind::kReady:
      return on_ready(e.epoch);
    case SimKind::kProgress:
      return on_progress(e.epoch, e.gen, e.arg);
    case SimKind::kStallEnd:
      return on_stall_end(e.epoch, e.arg);
    case SimKind::kCommit:
      return on_commit(e.epoch, e.arg);
    case SimKind::kCommitSeen:
      return on_commit_seen(e.epoch, e.arg, e.gen != 0);
    case SimKind::kNodesStopped:
      return on_nodes_stopped(e.epoch);
    case SimKind::kResume:
      return on_resume(e.epoch);
    case SimKind::kMachineStart:
      return start_machine();
    case SimKind::kScript:
      return script_apply(e.arg);
    case SimKind::kSurvivorStep:
      if (attempt_ && attempt_->epoch == e.epoch) {
        ++result_.heartbeats;
        feed(event::Heartbeats{e.epoch, {}, e.arg});
      }
      return;
    case SimKind::kNodeLost: {
      PoolSlot& s = pool_[fleet_.slot_of(static_cast<NodeId>(e.arg))];
      if (!machine_live() || !s.member || s.member_node != e.arg) return;
      s.member = false;
      return feed(event::NodeLost{static_cast<NodeId>(e.arg), "no heartbeat: the machine is gone"});
    }
  }
}

// ---- the fleet -------------------------------------------------------------------------

PoolSlot* JobSim::slot_of(NodeId node) {
  PoolSlot& s = pool_[fleet_.slot_of(node)];
  return s.alive && s.node == node ? &s : nullptr;
}

void JobSim::on_fleet_event(const FleetEvent& e) {
  switch (e.kind) {
    case FleetEventKind::kUp: {
      PoolSlot& s = pool_[e.slot];
      if (!s.alive) ++alive_count_;
      s.node = e.node;
      s.alive = true;
      s.leaving = false;
      if (machine_live()) join(e.slot);
      return;
    }
    case FleetEventKind::kFailure:
      return on_failure(e);
    case FleetEventKind::kNotice: {
      PoolSlot* s = slot_of(e.node);
      if (s == nullptr) return;
      s->leaving = true;
      if (!policy_.emergency || !machine_live() || !s->member) return;
      heartbeat(false);
      event::Notice n;
      n.node = e.node;
      n.source = std::string(cloud_name(c_.preemption.cloud));
      n.kind = "spot-interruption";
      const double left = e.deadline - t_;
      n.deadline = now().wall + std::chrono::duration_cast<WallTime::duration>(secs(left));
      n.id = ++notice_ids_;
      ++result_.notices;
      return feed(n);
    }
    case FleetEventKind::kGone:
      ++result_.preemptions;
      return node_gone(e.node);
  }
}

void JobSim::on_failure(const FleetEvent& e) {
  const FailureCause& cause = fleet_.causes[static_cast<size_t>(e.cause)];
  if (slot_of(e.node) == nullptr) return;
  if (attempt_ && !attempt_->stopped && !attempt_->dead && in_attempt(e.node)) {
    ++result_.failures_hit;
    AttemptModel& a = *attempt_;
    switch (cause.manifest) {
      case Manifest::kCrash:
        heartbeat(false);
        rank_died();
        feed(event::RankExited{a.epoch, first_rank(e.node), true, 0, 6, false,
                               "killed by signal 6 (SIGABRT): " + cause.name});
        break;
      case Manifest::kHang:  // no more steps, no more heartbeats: the hang check finds it
        heartbeat(false);
        freeze();
        a.hung = true;
        break;
      case Manifest::kNodeLost:
        heartbeat(false);
        rank_died();
        break;
    }
  }
  if (cause.replace_node) node_gone(e.node);
}

// The machine in the slot is gone (preempted, or failed for good): its ranks die with it and
// the supervisor hears of it after the heartbeat misses.
void JobSim::node_gone(NodeId node) {
  PoolSlot* s = slot_of(node);
  if (s == nullptr) return;
  s->alive = false;
  s->leaving = false;
  --alive_count_;
  if (attempt_ && !attempt_->stopped && !attempt_->dead && in_attempt(node)) {
    heartbeat(false);
    rank_died();
  }
  if (machine_live() && s->member)
    schedule(t_ + c_.costs.node_loss_detection, SimKind::kNodeLost, 0, 0, node);
}

}  // namespace shardguard::sim
