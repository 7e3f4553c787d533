// One attempt's ranks as the simulator plays them: launch, load and ready; steps at a fixed
// rate (a fixed global batch, so n nodes of N take N/n as long per step); saves at the
// clients' own step schedule or at the machine's at_step (the loop stops for the snapshot,
// or for the whole save when saves are synchronous or an emergency); commits after the save
// cost; teardown after the kill time. Work past the resume point of a new attempt is lost.
#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "sim/job_sim_impl.h"

namespace shardguard::sim {

AttemptModel* JobSim::current(Epoch e) {
  return attempt_ && attempt_->epoch == e ? &*attempt_ : nullptr;
}

bool JobSim::in_attempt(NodeId node) const {
  return attempt_ &&
         std::find(attempt_->nodes.begin(), attempt_->nodes.end(), node) != attempt_->nodes.end();
}

uint32_t JobSim::first_rank(NodeId node) const {
  const auto it = std::find(attempt_->nodes.begin(), attempt_->nodes.end(), node);
  return static_cast<uint32_t>(it - attempt_->nodes.begin()) * gpus_;
}

void JobSim::on_launch(const command::Launch& l) {
  AttemptModel a;
  a.epoch = l.epoch;
  for (const auto& slot : l.nodes) a.nodes.push_back(slot.node);
  a.n = static_cast<uint32_t>(a.nodes.size());
  a.resume = l.resume_step.value_or(0);
  a.step_s = c_.job.step_seconds * double(c_.job.nodes) / double(std::max<uint32_t>(a.n, 1));
  a.work = double(a.resume);
  a.work_t = t_;
  a.last_fed = a.resume;
  if (policy_.interval == policies::IntervalMode::kSteps && policy_.every_steps > 0)
    a.next_every = (a.resume / policy_.every_steps + 1) * policy_.every_steps;
  for (NodeId n : a.nodes)
    if (slot_of(n) == nullptr) a.dead = true;  // gone before the supervisor heard of it
  // Steps past the resume point were computed for nothing: they are done again.
  if (high_water_ > double(a.resume)) {
    const double lost = high_water_ - double(a.resume);
    ledger_.lose(lost * c_.job.step_seconds, c_.job.nodes * gpus_);
    result_.lost_steps += lost;
  }
  high_water_ = double(a.resume);
  attempt_ = std::move(a);
  ++result_.attempts;
  const double load = l.resume_step ? load_seconds(c_.calibration, attempt_->n) : 0.0;
  schedule(t_ + c_.costs.launch, SimKind::kNodesLaunched, l.epoch);
  schedule(t_ + c_.costs.launch + c_.costs.rendezvous + load, SimKind::kReady, l.epoch);
}

void JobSim::on_nodes_launched(Epoch e) {
  AttemptModel* a = current(e);
  if (a == nullptr || a->stopped) return;
  const std::vector<NodeId> nodes = a->nodes;
  for (NodeId n : nodes)
    if (slot_of(n) != nullptr) feed(event::NodeLaunched{e, n});
}

void JobSim::on_ready(Epoch e) {
  AttemptModel* a = current(e);
  if (a == nullptr || a->stopped || a->dead) return;
  a->ready = true;
  a->work_t = t_;
  a->hb_time = t_;
  a->hb_step = a->resume;
  ++a->gen;
  script_ready();
  ++result_.heartbeats;
  feed(event::Heartbeats{e, {}, a->resume});
  script_anchor(ScriptedDisruption::Anchor::kReady);
  reschedule();
}

// Brings `work` up to now; events scheduled from the old rate become stale.
void JobSim::freeze() {
  if (!attempt_) return;
  AttemptModel& a = *attempt_;
  std::tie(a.hb_step, a.hb_time) = client_heartbeat(a, t_);
  a.work = a.progress(t_);
  a.work_t = t_;
  ++a.gen;
  high_water_ = std::max(high_water_, a.work);
}

void JobSim::set_stalled(bool stalled) {
  freeze();
  attempt_->stalled = stalled;
  reschedule();
}

// Schedules the moment the ranks reach the next step that is to be saved.
void JobSim::reschedule() {
  if (!attempt_ || !attempt_->progressing()) return;
  AttemptModel& a = *attempt_;
  uint64_t target = a.next_every;
  if (a.request && (target == 0 || *a.request < target)) target = *a.request;
  if (target == 0) return;
  const double left = std::max(0.0, double(target) - a.work);
  schedule(t_ + left * a.step_s, SimKind::kProgress, a.epoch, a.gen, target);
}

void JobSim::on_progress(Epoch e, uint64_t gen, uint64_t step) {
  AttemptModel* a = current(e);
  if (a == nullptr || gen != a->gen || !a->progressing()) return;
  std::tie(a->hb_step, a->hb_time) = client_heartbeat(*a, t_);
  a->work = double(step);
  a->work_t = t_;
  high_water_ = std::max(high_water_, a->work);
  begin_save(step);
}

// The ranks finished `step` and save it: for the machine's request, their own schedule, or both.
void JobSim::begin_save(uint64_t step) {
  AttemptModel& a = *attempt_;
  bool emergency = false;
  if (a.request && *a.request <= step) {
    emergency = a.request_kind == CheckpointKind::kEmergency;
    a.request.reset();
  }
  if (a.next_every != 0 && step >= a.next_every)
    a.next_every = (step / policy_.every_steps + 1) * policy_.every_steps;
  if (a.saving) {  // the previous write still runs: the loop waits for it (one save at a time)
    a.waiting_for_write = true;
    a.waiting_step = step;
    a.waiting_emergency = emergency;
    return set_stalled(true);
  }
  start_save(step, emergency);
}

void JobSim::start_save(uint64_t step, bool emergency) {
  const Epoch e = attempt_->epoch;
  feed(event::SaveBegan{e, 0, step});
  AttemptModel* a = current(e);
  if (a == nullptr || a->stopped) return;
  const Calibration& cal = c_.calibration;
  const double snapshot = cal.async_save ? stall_seconds(cal, a->n, gpus_) : 0.0;
  const double commit_at = t_ + snapshot + save_seconds(cal, a->n);
  a->saving = step;
  a->saving_emergency = emergency;
  a->write_done = commit_at;
  set_stalled(true);
  // An emergency save ends the attempt: the loop does not run again. A periodic one resumes
  // after the snapshot (asynchronous saves) or at the commit (synchronous ones).
  if (!emergency && cal.async_save) schedule(t_ + snapshot, SimKind::kStallEnd, e, 0, step);
  schedule(commit_at, SimKind::kCommit, e, 0, step);
}

void JobSim::on_stall_end(Epoch e, uint64_t step) {
  AttemptModel* a = current(e);
  if (a == nullptr || a->stopped || !a->stalled || a->waiting_for_write) return;
  if (!a->saving || *a->saving != step) return;
  set_stalled(false);
}

// The save is durable (the manifest renamed into place): the ranks go on, or leave after an
// emergency save; the supervisor hears of it once it has read the manifest back.
void JobSim::on_commit(Epoch e, uint64_t step) {
  AttemptModel* a = current(e);
  // A rank that died or hangs writes no sidecar: the commit never happens.
  if (a == nullptr || a->stopped || a->dead || a->hung || !a->saving || *a->saving != step) return;
  const bool emergency = a->saving_emergency;
  a->saving.reset();
  a->write_done = -1;
  const auto pos = std::lower_bound(committed_.begin(), committed_.end(), step);
  if (pos == committed_.end() || *pos != step) committed_.insert(pos, step);
  ++result_.checkpoints;
  schedule(t_ + c_.costs.commit_readback, SimKind::kCommitSeen, e, emergency ? 1 : 0, step);
  if (emergency) {
    ++result_.emergency_commits;
    freeze();
    a->exiting = true;
    return;
  }
  if (a->waiting_for_write) {
    a->waiting_for_write = false;
    return start_save(a->waiting_step, a->waiting_emergency);
  }
  if (a->stalled && !c_.calibration.async_save) set_stalled(false);
}

void JobSim::on_commit_seen(Epoch e, uint64_t step, bool emergency) {
  feed(event::Committed{e, step, "step-" + std::to_string(step) + "/manifest.json", 0});
  AttemptModel* a = current(e);
  if (!emergency && a != nullptr && a->running())
    script_anchor(ScriptedDisruption::Anchor::kCommit);
}

void JobSim::on_checkpoint_now(const command::CheckpointNow& cn) {
  AttemptModel* a = current(cn.epoch);
  if (a == nullptr || a->stopped) return;
  const bool emergency = cn.kind == CheckpointKind::kEmergency;
  // A save already on its way covers the request when it is of that step or later.
  if (a->saving && *a->saving >= cn.at_step) {
    a->saving_emergency |= emergency;
    return;
  }
  if (a->waiting_for_write && a->waiting_step >= cn.at_step) {
    a->waiting_emergency |= emergency;
    return;
  }
  const double done = std::floor(a->progress(t_));
  if (a->ready && done >= double(cn.at_step)) {
    // Already past it, as a real rank would say; the machine asks again with a later step.
    return feed(event::Passed{cn.epoch, 0, static_cast<uint64_t>(done)});
  }
  freeze();
  a->request = cn.at_step;
  a->request_kind = cn.kind;
  reschedule();
}

void JobSim::on_teardown(const command::TearDown& td) {
  AttemptModel* a = current(td.epoch);
  if (a == nullptr || a->stopped) return;
  freeze();
  const bool gone_already = a->exiting;  // they left after the emergency commit: nothing to kill
  a->stopped = true;
  a->saving.reset();
  a->waiting_for_write = false;
  schedule(t_ + (gone_already ? 0.0 : c_.costs.teardown), SimKind::kNodesStopped, td.epoch);
}

void JobSim::on_nodes_stopped(Epoch e) {
  AttemptModel* a = current(e);
  if (a == nullptr) return;
  // Nodes that died cannot confirm; the machine hears NodeLost for them instead.
  const std::vector<NodeId> nodes = a->nodes;
  for (NodeId n : nodes)
    if (slot_of(n) != nullptr) feed(event::NodeStopped{e, n});
}

void JobSim::on_resume(Epoch e) {
  if (!machine_live()) return;
  std::optional<uint64_t> step;
  for (auto it = committed_.rbegin(); it != committed_.rend(); ++it) {
    if (std::find(skip_steps_.begin(), skip_steps_.end(), *it) != skip_steps_.end()) continue;
    step = *it;
    break;
  }
  feed(event::ResumeFound{e, step, step ? "step-" + std::to_string(*step) + "/manifest.json" : ""});
}

// A rank (or a node) of the running attempt died: the job stops making progress. Independent
// ranks first finish the step they are in and report it, if that comes before the teardown
// would have stopped them; that step is lost with the others.
void JobSim::rank_died() {
  AttemptModel& a = *attempt_;
  if (c_.job.independent_ranks && a.progressing()) {
    const double next = std::floor(a.progress(t_) + 1e-9) + 1;
    const double at = a.work_t + (next - a.work) * a.step_s;
    if (at < t_ + c_.costs.teardown && at - a.hb_time >= c_.costs.heartbeat_interval) {
      schedule(at, SimKind::kSurvivorStep, a.epoch, 0, uint64_t(next));
      freeze();
      high_water_ = std::max(high_water_, next);
      a.dead = true;
      return;
    }
  }
  freeze();
  a.dead = true;
}

// The clients' last heartbeat at `t` (step, time): one after each step, at most once per
// heartbeat_interval, so every m = ceil(interval / step) steps while the loop runs, the first
// one after a pause once the interval since the previous one has passed.
std::pair<uint64_t, double> JobSim::client_heartbeat(const AttemptModel& a, double t) const {
  if (!a.progressing() || t <= a.work_t) return {a.hb_step, a.hb_time};
  const double interval = c_.costs.heartbeat_interval;
  const double done = a.work + (t - a.work_t) / a.step_s;
  auto end_of = [&](double k) { return a.work_t + (k - a.work) * a.step_s; };
  if (interval <= 0) {
    const double k = std::floor(done + 1e-9);
    return k > double(a.hb_step) ? std::pair{uint64_t(k), end_of(k)}
                                 : std::pair{a.hb_step, a.hb_time};
  }
  // The first step ending at or after both the pause's end and the previous heartbeat + interval.
  const double eligible = std::max(a.work_t, a.hb_time + interval);
  const double first = std::max(std::floor(a.work + 1e-9) + 1,
                                std::ceil(a.work + (eligible - a.work_t) / a.step_s - 1e-9));
  if (first > done + 1e-9) return {a.hb_step, a.hb_time};
  const double m = std::max(1.0, std::ceil(interval / a.step_s - 1e-9));
  const double last = first + std::floor((std::floor(done + 1e-9) - first) / m) * m;
  return {uint64_t(last), end_of(last)};
}

// A node-level heartbeat (every rank at the same step), when the ranks are alive: always
// before the hang check, else only when the step heard moved since the last one fed. It
// carries the step the clients last reported (client_heartbeat).
void JobSim::heartbeat(bool always) {
  if (!attempt_ || !attempt_->running()) return;
  AttemptModel& a = *attempt_;
  const uint64_t step = client_heartbeat(a, t_).first;
  if (!always && step <= a.last_fed) return;
  a.last_fed = std::max(a.last_fed, step);
  ++result_.heartbeats;
  feed(event::Heartbeats{a.epoch, {}, a.last_fed});
}

}  // namespace shardguard::sim
