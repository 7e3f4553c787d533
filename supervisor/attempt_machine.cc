// The AttemptMachine's attempts: when an epoch launches and on which nodes, when it is torn
// down, how its end is classified, and whether and when to relaunch (membership is in
// machine_membership.cc, checkpoints in machine_checkpoints.cc).
#include "supervisor/attempt_machine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/exit_codes.h"
#include "core/units.h"
#include "supervisor/attempt_machine_impl.h"

namespace shardguard::supervisor {

double to_seconds(Duration d) { return std::chrono::duration<double>(d).count(); }
std::string seconds_text(Duration d) { return format_duration(d); }

std::string_view phase_name(Phase p) {
  switch (p) {
    case Phase::kPending: return "pending";
    case Phase::kLaunching: return "launching";
    case Phase::kRunning: return "running";
    case Phase::kCheckpointing: return "checkpointing";
    case Phase::kDraining: return "draining";
    case Phase::kStopping: return "stopping";
    case Phase::kBackoff: return "backoff";
    case Phase::kSucceeded: return "succeeded";
    case Phase::kFailed: return "failed";
    case Phase::kPreempted: return "preempted";
  }
  return "unknown";
}

// ---- attempts --------------------------------------------------------------------------

void AttemptMachine::Impl::begin_attempt(Now now) {
  cancel(TimerId::kJoinWindow);
  cancel(TimerId::kRendezvous);
  phase = Phase::kLaunching;
  save_begin.clear();  // saves begun by an earlier attempt are not this one's
  attempt.emplace();
  attempt->epoch = epoch;
  attempt->start = now.steady;
  guard.reset();  // the new attempt's ranks start from a checkpoint: fresh medians
  out.push_back(command::FindResume{epoch, skip_steps, guard_skip_from()});
}

void AttemptMachine::Impl::on(Now now, const event::ResumeFound& e) {
  if (finished || !attempt || attempt->epoch != e.epoch || attempt->launched) return;
  if (!e.step && e.skipped_complete) {
    record("give_up", {{"attempt", e.epoch}, {"class", std::string("no_progress")},
                       {"why", std::string("no older checkpoint to fall back to; a fresh start "
                                           "could never commit the existing steps again")}});
    return finish(now, command::FinalState::kFailed, kExitGaveUp,
                  "no_progress: no older checkpoint to fall back to");
  }
  const std::vector<NodeId> nodes = placeable_nodes();
  if (nodes.size() < cfg.min_nodes) {  // lost one while looking for the checkpoint
    attempt.reset();
    phase = Phase::kPending;
    return maybe_begin(now);
  }
  AttemptState& a = *attempt;
  a.launched = true;
  a.start = now.steady;
  a.resume_step = e.step;
  a.resume_manifest = e.manifest;
  // What a resume starts from counts as committed for "lost steps" and "last committed".
  if (e.step && (!any_committed || *e.step > last_committed)) {
    last_committed = *e.step;
    any_committed = true;
  }
  command::Launch launch;
  launch.epoch = a.epoch;
  launch.nproc_per_node = cfg.nproc_per_node;
  for (uint32_t i = 0; i < nodes.size(); ++i)
    a.layout.push_back({nodes[i], i, i * cfg.nproc_per_node, cfg.nproc_per_node});
  a.world_size = static_cast<uint32_t>(nodes.size()) * cfg.nproc_per_node;
  a.ranks.assign(a.world_size, RankView{});
  launch.world_size = a.world_size;
  launch.nodes = a.layout;
  auto first = std::find_if(members.begin(), members.end(),
                            [&](const NodeMember& m) { return m.node == nodes.front(); });
  launch.master_addr = first->address.empty() ? cfg.master_addr : first->address;
  uint32_t port = uint32_t{cfg.master_port} + static_cast<uint32_t>(a.epoch % kMasterPortSpan);
  if (port > 65535) port -= kMasterPortSpan;
  launch.master_port = static_cast<uint16_t>(port);
  launch.resume_step = e.step;
  launch.resume_manifest = e.manifest;
  launch.skip_batches = guard_resume_found(a.epoch, e.step);
  a.master_addr = launch.master_addr;
  a.master_port = launch.master_port;
  out.push_back(launch);
  std::string node_list;
  for (NodeId n : nodes) node_list += (node_list.empty() ? "" : ",") + std::to_string(n);
  record("launch", {{"attempt", a.epoch},
                    {"nproc", uint64_t{a.world_size}},
                    {"nodes", node_list},
                    {"master_port", uint64_t{launch.master_port}},
                    {"resume_step", e.step ? int64_t(*e.step) : int64_t{-1}},
                    {"resume_manifest", e.manifest},
                    {"skip_batches", launch.skip_batches}});
  arm_health(now);
  arm_periodic(now);
}

void AttemptMachine::Impl::on(Now, const event::NodeLaunched& e) {
  if (!in_current_attempt(e.epoch)) return;
  attempt->nodes_launched.insert(e.node);
  if (phase == Phase::kLaunching && attempt->nodes_launched.size() >= attempt->layout.size())
    phase = Phase::kRunning;
}

void AttemptMachine::Impl::on(Now now, const event::LaunchFailed& e) {
  if (!in_current_attempt(e.epoch)) return;
  record("launch_failed", {{"attempt", e.epoch}, {"node", uint64_t{e.node}}, {"error", e.error},
                           {"transient", e.transient}});
  if (!e.transient) {
    // The command cannot start at all: restarting will not help.
    attempt->launch_error = e.error;
    return begin_teardown(now, "launch failed on node " + std::to_string(e.node) + ": " + e.error);
  }
  attempt->exits.push_back({0, false, -1, 0});
  attempt->node_lost = true;  // counted against the infrastructure budget
  begin_teardown(now, "launch failed on node " + std::to_string(e.node) + ": " + e.error);
}

void AttemptMachine::Impl::on(Now, const event::RankHello& e) {
  if (!in_current_attempt(e.epoch) || e.rank >= attempt->world_size) return;
  RankView& r = attempt->ranks[e.rank];
  r.hello = true;
  r.pid = e.pid;
  record("hello", {{"attempt", e.epoch}, {"rank", uint64_t{e.rank}}, {"pid", e.pid}});
}

void AttemptMachine::Impl::on(Now now, const event::RankExited& e) {
  if (!in_current_attempt(e.epoch) || e.rank >= attempt->world_size) return;
  RankView& r = attempt->ranks[e.rank];
  if (r.exit) return;
  r.exit = e;
  r.saving.reset();
  record("rank_exit", {{"attempt", e.epoch}, {"rank", uint64_t{e.rank}},
                       {"status", e.description}, {"killed_by_us", e.during_teardown}});
  if (!e.during_teardown) attempt->exits.push_back({e.rank, e.signaled, e.code, e.signal});
  if (attempt->tearing_down) return;
  const bool success = !e.signaled && e.code == 0;
  const bool stopped_after_save = !e.signaled && e.code == kJobExitAfterEmergency;
  const std::string what = "rank " + std::to_string(e.rank) + " " + e.description;
  if (phase == Phase::kDraining) {
    if (all_ranks_exited()) begin_teardown(now, "every rank exited");
    return;
  }
  if (phase == Phase::kCheckpointing && !stopped_after_save) {
    // The emergency checkpoint cannot commit without this rank: do not wait for the deadline.
    emergency->failure = what + " during the emergency checkpoint";
    return begin_teardown(now, emergency->failure);
  }
  if (!success && !stopped_after_save) return begin_teardown(now, what);
  if (all_ranks_exited()) begin_teardown(now, "every rank exited");
}

void AttemptMachine::Impl::on(Now now, const event::NodeStopped& e) {
  if (!attempt || attempt->epoch != e.epoch || !attempt->tearing_down) return;
  attempt->nodes_stopped.insert(e.node);
  if (attempt->nodes_stopped.size() >= attempt->layout.size()) attempt_ended(now);
}

void AttemptMachine::Impl::on(Now now, const event::Abort& e) {
  record("abort", {{"why", e.why}, {"exit_code", int64_t{e.exit_code}}});
  if (!attempt || !attempt->launched)
    return finish(now, command::FinalState::kFailed, e.exit_code, e.why);
  attempt->abort = e;
  if (attempt->tearing_down) return;
  begin_teardown(now, e.why);
}

void AttemptMachine::Impl::begin_teardown(Now now, const std::string& why) {
  if (!attempt || attempt->tearing_down) return;
  attempt->tearing_down = true;
  for (TimerId t : {TimerId::kHealth, TimerId::kPeriodic, TimerId::kDrain, TimerId::kDeadline})
    cancel(t);
  if (request && request->kind != CheckpointKind::kEmergency) request.reset();
  phase = Phase::kStopping;
  record("teardown", {{"attempt", attempt->epoch}, {"why", why}});
  if (!attempt->launched || attempt->nodes_stopped.size() >= attempt->layout.size())
    return attempt_ended(now);
  command::TearDown down{attempt->epoch, why};
  // What is left of the ranks in an emergency is killed half the safety margin before the
  // notice's deadline at the latest, so that the order holds whatever the term grace: saved by
  // the deadline less the margin, killed by less half of it, the machine gone at the deadline
  // (a term grace longer than the margin had a rank SIGKILLed after the cloud's time).
  if (emergency && emergency->deadline != WallTime{}) {
    const auto half_margin = std::chrono::duration_cast<WallTime::duration>(cfg.safety_margin / 2);
    down.kill_by = std::max(now.wall, emergency->deadline - half_margin);
  }
  out.push_back(std::move(down));
  arm(TimerId::kStopTimeout, now.steady + cfg.stop_timeout);
}

void AttemptMachine::Impl::attempt_ended(Now now) {
  cancel(TimerId::kStopTimeout);
  AttemptState a = std::move(*attempt);
  attempt.reset();
  request.reset();
  if (finished) return;
  running_time += now.steady - a.start;

  policies::ExitContext ctx;
  ctx.exits = a.exits;
  ctx.notice_active = emergency.has_value();
  ctx.hang_detected = a.hang_detected;
  ctx.node_unhealthy = node_unhealthy;
  ctx.torn_down_by_us = std::any_of(a.ranks.begin(), a.ranks.end(), [](const RankView& r) {
    return r.exit && r.exit->during_teardown;
  });
  ctx.node_lost = a.node_lost;
  ctx.save_out_of_space = a.save_out_of_space;
  ctx.resume_failed = a.resume_failed;
  ctx.resize = a.resize;
  ctx.diverged = a.divergence.has_value();
  ctx.preemption_exit_codes = cfg.preemption_exit_codes;
  const policies::ExitClass cls = policies::classify_exit(ctx);
  const std::string detail = policies::describe_exit(ctx);
  uint64_t base = std::max(a.resume_step.value_or(0), a.committed.value_or(0));
  // Checkpoints from the anomaly on are set aside: what was computed after it is lost.
  if (a.divergence) base = std::min(base, guard_state.suspect_from > 0 ? guard_state.suspect_from - 1 : 0);
  const uint64_t lost = cls == policies::ExitClass::kSuccess || a.max_step <= base ? 0 : a.max_step - base;
  lost_steps += lost;
  last_attempt_lost = lost;
  EventFields end{
      {"attempt", a.epoch},
      {"class", std::string(policies::exit_class_name(cls))},
      {"detail", detail},
      {"seconds", to_seconds(now.steady - a.start)},
      {"max_step", a.max_step},
      {"lost_steps", lost},
      {"by_notice", emergency.has_value()},
      // For the loop breaker's count in the checkpoint directory: only crashes
      // and hangs without a notice point at the checkpoint (policies::RestartPolicy).
      {"blames_checkpoint", !emergency.has_value() && (cls == policies::ExitClass::kCrash ||
                                                       cls == policies::ExitClass::kHang ||
                                                       cls == policies::ExitClass::kNoProgress)}};
  if (a.resume_step) end.push_back({"resume_step", *a.resume_step});
  if (a.committed) end.push_back({"committed_step", *a.committed});
  record("attempt_end", std::move(end));

  if (a.launch_error) {
    return finish(now, command::FinalState::kFailed, kExitFailure,
                  "the command cannot start: " + *a.launch_error);
  }
  if (a.abort) return finish(now, command::FinalState::kFailed, a.abort->exit_code, a.abort->why);
  if (emergency) {
    // The notified nodes leave, whatever the notice (a preemption, a drain of that node, a
    // failed health check); the job goes on without them when enough nodes remain (elastic),
    // else the whole job stops here and the scheduler requeues it.
    const bool elastic = cfg.max_nodes > 1;
    if (elastic)
      for (auto& m : members)
        if (emergency->nodes.contains(m.node)) m.leaving = true;
    if (!elastic || placeable_nodes().size() < cfg.min_nodes)
      return finish(now, command::FinalState::kPreempted, kExitPreempted, emergency_summary());
    record("shrink", {{"nodes", uint64_t(placeable_nodes().size())},
                      {"why", "notified nodes leave: " + emergency->reason}});
    // The notified nodes' supervisors are done: they exit instead of idling to the job's end.
    for (auto& m : members)
      if (m.leaving && m.alive) {
        out.push_back(command::Release{m.node, emergency->reason});
        record("node_released", {{"node", uint64_t{m.node}}, {"why", emergency->reason}});
      }
    emergency.reset();
    return relaunch_after(now, policies::ExitClass::kPreempted, "preempted: nodes left", detail, a);
  }
  if (a.divergence) return guard_attempt_ended(now, a, detail);
  if (cls == policies::ExitClass::kSuccess)
    return finish(now, command::FinalState::kSucceeded, kExitOk, "every rank exited 0");
  relaunch_after(now, cls, "", detail, a);
}

void AttemptMachine::Impl::relaunch_after(Now now, policies::ExitClass cls, const std::string& why,
                                          const std::string& detail, const AttemptState& a) {
  const std::string name(policies::exit_class_name(cls));
  const auto decision = policy.on_exit(cls, now.steady, a.resume_step, a.committed);
  if (!decision.restart) {
    record("give_up", {{"attempt", a.epoch}, {"class", name}, {"why", decision.reason}});
    hook("give_up", {{"class", name}, {"reason", decision.reason}, {"detail", detail}});
    return finish(now, command::FinalState::kFailed, kExitGaveUp, decision.reason);
  }
  restarts[name]++;
  if (decision.use_previous_checkpoint && a.resume_step) {
    skip_steps.push_back(*a.resume_step);
    record("fallback_checkpoint",
           {{"attempt", a.epoch}, {"step", *a.resume_step}, {"why", decision.reason}});
    // The suspect checkpoint is set aside with the evidence (kept, never resumed again; a
    // person may put it back with `shardguard ckpt unquarantine`).
    out.push_back(command::Quarantine{*a.resume_step, a.resume_manifest,
                                      "loop breaker: " + decision.reason});
  }
  // A resize or a rollback is a decision, not a failure: no failure counted, no backoff.
  const bool decided = cls == policies::ExitClass::kResize || cls == policies::ExitClass::kDivergence;
  if (cls != policies::ExitClass::kPreempted && !decided) failure_rate.record_failure(now.steady);
  if (now.steady - a.start >= cfg.healthy_after) backoff.reset();
  const Duration delay = decided ? Duration{0} : backoff.next();
  const std::string reason = why.empty() ? decision.reason : why;
  record("backoff", {{"attempt", a.epoch}, {"class", name}, {"seconds", to_seconds(delay)},
                     {"why", reason}});
  hook("restart", {{"class", name}, {"reason", reason}, {"detail", detail}});
  ++epoch;
  phase = Phase::kBackoff;
  arm(TimerId::kBackoff, now.steady + delay);
}

void AttemptMachine::Impl::finish(Now, command::FinalState state, int code,
                                  const std::string& summary) {
  if (finished) return;
  finished = true;
  exit_code = code;
  phase = state == command::FinalState::kSucceeded   ? Phase::kSucceeded
          : state == command::FinalState::kPreempted ? Phase::kPreempted
                                                     : Phase::kFailed;
  for (TimerId t : std::set<TimerId>(armed)) cancel(t);
  record("finish", {{"state", std::string(command::final_state_name(state))},
                    {"exit_code", int64_t{code}},
                    {"attempts", epoch + 1},
                    {"summary", summary}});
  out.push_back(command::Finish{state, code, summary});
}

// ---- the public face -------------------------------------------------------------------

AttemptMachine::AttemptMachine(MachineConfig config, std::function<double()> uniform01)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(uniform01))) {}
AttemptMachine::~AttemptMachine() = default;

void AttemptMachine::seed_loop_breaker(std::map<std::optional<uint64_t>, uint32_t> failed_resumes,
                                       std::set<uint64_t> fallback_tried) {
  impl_->policy.seed(std::move(failed_resumes), std::move(fallback_tried));
}

void AttemptMachine::seed_save_time(Duration last_save) { impl_->seeded_save = last_save; }

Commands AttemptMachine::start(Now now, Epoch first_epoch) {
  Impl& m = *impl_;
  m.out.clear();
  m.job_start = now.steady;
  m.epoch = first_epoch;
  m.failure_rate.set_start(now.steady);
  m.check_save_window(m.seeded_save, "start");
  m.maybe_begin(now);
  return std::move(m.out);
}

Commands AttemptMachine::handle(Now now, const Event& event) {
  Impl& m = *impl_;
  m.out.clear();
  if (!m.finished) std::visit([&](const auto& e) { m.on(now, e); }, event);
  return std::move(m.out);
}

namespace {

const policies::ExitClass kBudgetedClasses[] = {
    policies::ExitClass::kCrash,     policies::ExitClass::kHang,
    policies::ExitClass::kInfrastructure, policies::ExitClass::kPreempted,
    policies::ExitClass::kNoSpace,   policies::ExitClass::kResumeFailed};

}  // namespace

CoordinatorState AttemptMachine::snapshot(Now now) const {
  const Impl& m = *impl_;
  CoordinatorState s;
  s.epoch = m.epoch;
  if (m.attempt && m.attempt->launched) {
    const AttemptState& a = *m.attempt;
    s.running = !a.tearing_down;
    s.layout = a.layout;
    s.world_size = a.world_size;
    s.resume_step = a.resume_step;
    s.resume_manifest = a.resume_manifest;
    s.master_addr = a.master_addr;
    s.master_port = a.master_port;
  }
  for (const auto& mem : m.members)
    if (mem.alive) s.members.push_back({mem.node, mem.address});
  if (m.any_committed) s.last_committed = m.last_committed;
  if (m.emergency) s.notices = m.emergency->notices;
  for (auto c : kBudgetedClasses) {
    auto& times = s.restarts[std::string(policies::exit_class_name(c))];
    for (SteadyTime t : m.policy.granted(c))
      times.push_back(to_unix_ms(now.wall - std::chrono::duration_cast<WallTime::duration>(now.steady - t)));
  }
  return s;
}

Commands AttemptMachine::adopt(Now now, const CoordinatorState& s) {
  Impl& m = *impl_;
  m.out.clear();
  m.job_start = now.steady;
  m.failure_rate.set_start(now.steady);
  m.epoch = s.epoch;
  if (s.last_committed) {
    m.last_committed = *s.last_committed;
    m.any_committed = true;
  }
  for (auto c : kBudgetedClasses) {
    auto it = s.restarts.find(std::string(policies::exit_class_name(c)));
    if (it == s.restarts.end()) continue;
    std::vector<SteadyTime> times;
    for (int64_t ms : it->second)
      times.push_back(now.steady - std::chrono::duration_cast<Duration>(now.wall - from_unix_ms(ms)));
    m.policy.restore_granted(c, times);
  }
  // Everyone must come back to this coordinator; nobody is counted present before.
  for (const auto& mem : s.members) m.members.push_back({mem.node, mem.address, false, false});
  EventFields adopted{
      {"attempt", s.epoch}, {"running", s.running}, {"nodes", uint64_t(s.members.size())}};
  // What the predecessor committed: this run directory's timeline starts here.
  if (s.last_committed) adopted.push_back({"last_committed", *s.last_committed});
  m.record("adopt", adopted);
  if (s.running && !s.layout.empty()) {
    m.attempt.emplace();
    AttemptState& a = *m.attempt;
    a.epoch = s.epoch;
    a.start = now.steady;
    a.launched = true;
    a.layout = s.layout;
    a.world_size = s.world_size;
    a.ranks.assign(a.world_size, RankView{});
    a.resume_step = s.resume_step;
    // A commit past the epoch's resume step was this epoch's: what it trained up to there is
    // not lost when it ends (a successor counted its lost steps from the resume step).
    if (s.last_committed && *s.last_committed > s.resume_step.value_or(0))
      a.committed = s.last_committed;
    a.resume_manifest = s.resume_manifest;
    a.master_addr = s.master_addr;
    a.master_port = s.master_port;
    for (const auto& slot : a.layout) a.nodes_launched.insert(slot.node);
    m.phase = Phase::kRunning;
    m.arm(TimerId::kRejoin, now.steady + m.cfg.rejoin_window);
    m.arm_periodic(now);
    m.adopt_notices(now, s.notices);
    // Placed nodes the record no longer lists as members are known gone (the predecessor's
    // own node, when it died with it): no need to wait for them.
    for (const auto& slot : s.layout)
      if (std::none_of(s.members.begin(), s.members.end(),
                       [&](const CoordinatorState::Member& mem) { return mem.node == slot.node; }))
        m.lose_placed_node(now, slot.node, "gone with the previous coordinator");
  } else {
    m.phase = Phase::kPending;
    m.adopt_notices(now, s.notices);
    if (!m.finished) m.maybe_begin(now);
  }
  return std::move(m.out);
}

// The predecessor's emergency goes on here: its notices are taken again, deadlines as they
// were, so that a drained or preempted node still stops by its own deadline (a successor had
// adopted the epoch without them, and the drained node ran on for the rendezvous timeout).
void AttemptMachine::Impl::adopt_notices(Now now, const std::vector<event::Notice>& notices) {
  for (const auto& n : notices) {
    record("notice_adopted", {{"node", uint64_t{n.node}},
                              {"reason", n.detail},
                              {"deadline_unix_ms", to_unix_ms(n.deadline)},
                              {"seconds_left", to_seconds(n.deadline - now.wall)}});
    start_emergency(now, n);
  }
}

Phase AttemptMachine::phase() const { return impl_->phase; }
bool AttemptMachine::finished() const { return impl_->finished; }
int AttemptMachine::exit_code() const { return impl_->exit_code; }
Epoch AttemptMachine::epoch() const { return impl_->epoch; }
const MachineConfig& AttemptMachine::config() const { return impl_->cfg; }
uint64_t AttemptMachine::step_margin(Now now) const { return impl_->margin(now); }

bool AttemptMachine::runs_on(NodeId node, Epoch epoch) const {
  const auto& a = impl_->attempt;
  if (!a || !a->launched || a->epoch != epoch || a->tearing_down) return false;
  if (a->nodes_stopped.contains(node)) return false;
  return std::any_of(a->layout.begin(), a->layout.end(),
                     [&](const NodeSlot& s) { return s.node == node; });
}

std::optional<AttemptMachine::RankSpan> AttemptMachine::ranks_of(NodeId node, Epoch epoch) const {
  const auto& a = impl_->attempt;
  if (!a || a->epoch != epoch) return std::nullopt;
  for (const NodeSlot& s : a->layout)
    if (s.node == node) return RankSpan{s.first_rank, s.nproc};
  return RankSpan{};
}

uint32_t AttemptMachine::world_size() const {
  return impl_->attempt ? impl_->attempt->world_size : 0;
}

MachineStats AttemptMachine::stats(Now now) const {
  const Impl& m = *impl_;
  MachineStats s;
  s.epoch = m.epoch;
  s.last_committed_step = m.last_committed;
  s.any_committed = m.any_committed;
  s.lost_steps = m.lost_steps;
  s.checkpoints = m.checkpoints;
  s.checkpoint_seconds = m.checkpoint_seconds;
  if (m.cfg.save_window.stop_grace > Duration{0})
    s.save_window_seconds = to_seconds(policies::shortest_save_window(m.cfg.save_window).window);
  s.save_window_fraction = m.save_window_fraction;
  s.restarts = m.restarts;
  s.nodes = m.alive_members();
  s.running_time = m.running_time;
  if (m.attempt) {
    s.max_step = m.attempt->max_step;
    s.world_size = m.attempt->world_size;
    if (m.attempt->launched) s.running_time += now.steady - m.attempt->start;
  }
  return s;
}

}  // namespace shardguard::supervisor
