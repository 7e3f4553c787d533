// The AttemptMachine's checkpoints: steps reported by the ranks, checkpoint requests (one
// at_step for every rank, re-issued when a rank already passed it), commits, failed saves, and
// the emergency flow of a notice (earliest deadline wins; always try, even when the deadline
// is short or past).
#include <algorithm>
#include <cmath>

#include "core/exit_codes.h"
#include "supervisor/attempt_machine.h"
#include "supervisor/attempt_machine_impl.h"

namespace shardguard::supervisor {
namespace {

// A rank's step may grow at most this much between two reports; anything larger is a bug or
// a lie, and would push the emergency step out of reach.
constexpr uint64_t kMaxStepJump = 10'000'000;

SteadyTime steady_at(Now now, WallTime t) {
  return now.steady + std::chrono::duration_cast<Duration>(t - now.wall);
}

}  // namespace

uint64_t AttemptMachine::Impl::known_max_step() const {
  if (!attempt) return 0;
  return std::max(attempt->max_step, attempt->resume_step.value_or(0));
}

uint64_t AttemptMachine::Impl::margin(Now now) const {
  if (!attempt || !attempt->first_step) return 2;
  const double elapsed = to_seconds(now.steady - attempt->first_step_time);
  if (elapsed <= 0) return 2;
  const double rate = double(attempt->max_step - *attempt->first_step) / elapsed;
  const double steps = std::ceil(rate * to_seconds(cfg.request_latency)) + 1;
  return std::max<uint64_t>(2, steps > 1e12 ? uint64_t(1e12) : static_cast<uint64_t>(steps));
}

void AttemptMachine::Impl::on(Now now, const event::Heartbeats& e) {
  if (!in_current_attempt(e.epoch)) return;
  AttemptState& a = *attempt;
  auto beat = [&](uint32_t rank, uint64_t step) {
    if (rank >= a.world_size) return;
    RankView& r = a.ranks[rank];
    const uint64_t base = r.heartbeated ? r.step : a.resume_step.value_or(0);
    if (step > add_sat(base, kMaxStepJump)) {
      record("implausible_step", {{"attempt", a.epoch}, {"rank", uint64_t{rank}}, {"step", step},
                                  {"previous", base}});
      return;
    }
    r.heartbeated = true;
    r.step = std::max(r.step, step);
    r.last_heartbeat = now.steady;
    if (r.saving && r.step >= *r.saving) r.saving.reset();
    a.max_step = std::max(a.max_step, r.step);
    if (!a.first_step) {
      a.first_step = r.step;
      a.first_step_time = now.steady;
    }
  };
  if (e.all_ranks_at)
    for (uint32_t r = 0; r < a.world_size; ++r) beat(r, *e.all_ranks_at);
  for (const auto& rs : e.ranks) {
    beat(rs.rank, rs.step);
    if (rs.rank < a.world_size) check_scalars(now, rs.rank, rs.scalars);
  }
  if (!a.ranks_ready && std::all_of(a.ranks.begin(), a.ranks.end(),
                                    [](const RankView& r) { return r.heartbeated; })) {
    a.ranks_ready = true;
    record("ranks_ready", {{"attempt", a.epoch},
                           {"seconds_since_launch", to_seconds(now.steady - a.start)}});
  }
  if (!armed.contains(TimerId::kHealth) && !a.tearing_down) arm_health(now);
}

void AttemptMachine::Impl::on(Now now, const event::SaveBegan& e) {
  if (!in_current_attempt(e.epoch) || e.rank >= attempt->world_size) return;
  RankView& r = attempt->ranks[e.rank];
  r.saving = e.step;
  // A rank saving step S has reached it, whatever its last heartbeat said.
  if (e.step <= add_sat(r.heartbeated ? r.step : attempt->resume_step.value_or(0), kMaxStepJump)) {
    r.step = std::max(r.step, e.step);
    attempt->max_step = std::max(attempt->max_step, r.step);
  }
  save_begin.try_emplace(e.step, now.steady);
}

void AttemptMachine::Impl::on(Now, const event::ShardWritten& e) {
  if (!in_current_attempt(e.epoch) || e.rank >= attempt->world_size) return;
  auto& ranks = attempt->written[e.step];
  if (!ranks.insert(e.rank).second || ranks.size() != attempt->world_size) return;
  out.push_back(command::AllWritten{e.epoch, e.step});
  // Older steps can no longer complete in this attempt: forget them.
  attempt->written.erase(attempt->written.begin(), attempt->written.find(e.step));
}

std::string AttemptMachine::Impl::unfinished_part(uint64_t step) const {
  if (!attempt) return "no attempt running";
  const auto it = attempt->written.find(step);
  std::vector<uint32_t> missing;
  for (uint32_t r = 0; r < attempt->world_size; ++r)
    if (it == attempt->written.end() || !it->second.contains(r)) missing.push_back(r);
  if (missing.empty())
    return "every rank wrote its part of step " + std::to_string(step) + "; rank 0 did not commit";
  constexpr size_t kNamed = 16;
  std::string names;
  for (size_t i = 0; i < missing.size() && i < kNamed; ++i)
    names += (i ? ", " : "") + std::to_string(missing[i]);
  if (missing.size() > kNamed) names += " and " + std::to_string(missing.size() - kNamed) + " more";
  return std::string(missing.size() == 1 ? "rank " : "ranks ") + names + " of " +
         std::to_string(attempt->world_size) + " had not written " +
         (missing.size() == 1 ? "its" : "their") + " part of step " + std::to_string(step);
}

void AttemptMachine::Impl::check_save_window(Duration took, std::string_view when) {
  // No window configured (the simulator, unit tests): nothing to compare with.
  if (took <= Duration{0} || cfg.save_window.stop_grace <= Duration{0}) return;
  const auto c = policies::check_save_window(cfg.save_window, took);
  save_window_fraction = c.fraction;
  if (!c.warning || c.fraction < save_window_warned * 1.25) return;
  save_window_warned = c.fraction;
  std::string warning = *c.warning;
  if (when == "start") warning += " (measured by an earlier run on this run directory)";
  record("save_window", {{"seconds", to_seconds(took)},
                         {"window_seconds", to_seconds(c.window.window)},
                         {"source", c.window.source},
                         {"fraction", c.fraction},
                         {"when", std::string(when)},
                         {"warning", std::move(warning)}});
}

void AttemptMachine::Impl::on(Now now, const event::Committed& e) {
  if (!attempt || attempt->epoch != e.epoch) {
    record("stale_commit", {{"attempt", e.epoch}, {"step", e.step}, {"manifest", e.manifest}});
    return;
  }
  AttemptState& a = *attempt;
  Duration took{};
  if (auto it = save_begin.find(e.step); it != save_begin.end()) {
    took = now.steady - it->second;
    cost.record(took);
  }
  save_begin.erase(save_begin.begin(), save_begin.upper_bound(e.step));
  last_committed = any_committed ? std::max(last_committed, e.step) : e.step;
  any_committed = true;
  a.committed = std::max(a.committed.value_or(0), e.step);
  ++checkpoints;
  checkpoint_seconds += to_seconds(took);
  for (auto& r : a.ranks)
    if (r.saving && *r.saving <= e.step) r.saving.reset();
  record("checkpoint_committed", {{"attempt", e.epoch}, {"step", e.step},
                                  {"seconds", to_seconds(took)}, {"bytes", e.bytes},
                                  {"manifest", e.manifest}});
  out.push_back(command::SaveCommitted{e.epoch, e.step, e.manifest});
  check_save_window(took, "commit");
  hook("checkpoint_committed", {{"step", std::to_string(e.step)}, {"manifest", e.manifest}});
  if (guard_committed(e)) return;  // after the anomaly: set aside, not a checkpoint to count on
  if (emergency && !emergency->committed_step && request &&
      request->kind == CheckpointKind::kEmergency && e.step >= request->at_step)
    return emergency_committed(now, e.step);
  if (request && request->kind != CheckpointKind::kEmergency && e.step >= request->at_step)
    request.reset();
  // Nodes that joined or came back since the launch grow the job at a checkpoint boundary.
  if (!emergency && !a.tearing_down && placeable_nodes().size() > a.layout.size()) {
    a.resize = true;
    begin_teardown(now, "growing from " + std::to_string(a.layout.size()) + " to " +
                            std::to_string(placeable_nodes().size()) +
                            " nodes at the checkpoint of step " + std::to_string(e.step));
  }
}

void AttemptMachine::Impl::emergency_committed(Now now, uint64_t step) {
  emergency->committed_step = step;
  request.reset();
  for (uint64_t id : emergency->notice_ids) out.push_back(command::AckNotice{id});
  cancel(TimerId::kDeadline);
  if (attempt->tearing_down) return;
  phase = Phase::kDraining;
  if (all_ranks_exited()) return begin_teardown(now, "every rank exited");
  // The ranks exit by themselves after an emergency save; give them a moment.
  const Duration left = std::max(Duration{0}, steady_at(now, emergency->deadline) - now.steady);
  arm(TimerId::kDrain, now.steady + std::min(cfg.drain_wait, left));
}

void AttemptMachine::Impl::on(Now now, const event::SaveFailed& e) {
  if (!in_current_attempt(e.epoch)) return;
  AttemptState& a = *attempt;
  record("checkpoint_failed", {{"attempt", e.epoch}, {"rank", uint64_t{e.rank}}, {"step", e.step},
                               {"error", e.error}, {"no_space", e.no_space}});
  if (e.rank < a.world_size) a.ranks[e.rank].saving.reset();
  if (e.no_space) a.save_out_of_space = true;
  // The commit of this step cannot happen: nobody waits for it any longer.
  out.push_back(command::AbortSave{e.epoch, e.step,
                                   "rank " + std::to_string(e.rank) + ": " + e.error});
  if (!request || e.step < request->at_step) return;
  if (request->kind != CheckpointKind::kEmergency) {
    request.reset();
    return;
  }
  if (emergency && !emergency->committed_step && !a.tearing_down) {
    emergency->failure = "rank " + std::to_string(e.rank) + " could not save step " +
                         std::to_string(e.step) + ": " + e.error;
    begin_teardown(now, "the emergency checkpoint failed: " + emergency->failure);
  }
}

void AttemptMachine::Impl::on(Now now, const event::Passed& e) {
  if (!in_current_attempt(e.epoch) || attempt->tearing_down || !request) return;
  if (e.step < request->at_step) return;  // passed an older at_step; already re-issued
  if (e.step > add_sat(known_max_step(), kMaxStepJump)) {
    record("implausible_step", {{"attempt", e.epoch}, {"rank", uint64_t{e.rank}},
                                {"step", e.step}, {"previous", known_max_step()}});
    return;
  }
  if (e.rank < attempt->world_size) {
    RankView& r = attempt->ranks[e.rank];
    r.step = std::max(r.step, e.step);
    attempt->max_step = std::max(attempt->max_step, r.step);
  }
  request->at_step = add_sat(known_max_step(), margin(now));
  issue(now, "rank " + std::to_string(e.rank) + " was already at step " + std::to_string(e.step));
}

void AttemptMachine::Impl::on(Now now, const event::ResumeFailed& e) {
  if (!in_current_attempt(e.epoch)) return;
  AttemptState& a = *attempt;
  record("resume_failed", {{"attempt", e.epoch}, {"rank", uint64_t{e.rank}},
                           {"manifest", e.manifest}, {"file", e.file}, {"offset", e.offset},
                           {"error", e.error}});
  if (a.resume_failed) return;
  a.resume_failed = true;
  if (a.resume_step)
    out.push_back(command::Quarantine{*a.resume_step, a.resume_manifest,
                                      "rank " + std::to_string(e.rank) + " could not resume: " +
                                          e.error});
  begin_teardown(now, "rank " + std::to_string(e.rank) + " could not resume from " +
                          (a.resume_step ? "step " + std::to_string(*a.resume_step)
                                         : std::string("its checkpoint")) +
                          ": " + e.error);
}

void AttemptMachine::Impl::issue(Now now, const std::string& note) {
  command::CheckpointNow c{attempt->epoch, request->at_step, request->deadline, request->reason,
                           request->kind};
  out.push_back(c);
  EventFields f{{"attempt", attempt->epoch},
                {"at_step", request->at_step},
                {"kind", std::string(checkpoint_kind_name(request->kind))},
                {"reason", request->reason},
                {"deadline_unix_ms", to_unix_ms(request->deadline)}};
  if (!note.empty()) f.push_back({"note", note});
  if (request->kind == CheckpointKind::kEmergency) {
    const Duration estimate = cost.estimate(Duration{0});
    f.push_back({"estimated_write_seconds", to_seconds(estimate)});
    f.push_back({"seconds_left", to_seconds(request->deadline - now.wall)});
  }
  record("checkpoint_now", std::move(f));
}

void AttemptMachine::Impl::request_checkpoint(Now now, CheckpointKind kind,
                                              const std::string& reason, WallTime deadline) {
  if (!attempt || !attempt->launched || attempt->tearing_down) return;
  if (request && request->kind == CheckpointKind::kEmergency) return;
  request = PendingRequest{kind, add_sat(known_max_step(), margin(now)), deadline, reason};
  issue(now, "");
}

namespace {

std::string notice_reason(const event::Notice& n) {
  if (n.source == "drain") return n.detail.empty() ? "drain" : "drain: " + n.detail;
  if (n.source == "signal" || n.source.empty()) return n.kind;
  return n.source + "-" + n.kind;
}

}  // namespace

void AttemptMachine::Impl::on(Now now, const event::Notice& n) {
  const std::string reason = notice_reason(n);
  record("notice", {{"node", uint64_t{n.node}},
                    {"source", n.source},
                    {"kind", n.kind},
                    {"reason", reason},
                    {"action", std::string(n.action == NoticeAction::kStop ? "stop" : "checkpoint")},
                    {"preemption", n.preemption},
                    {"deadline_unix_ms", to_unix_ms(n.deadline)},
                    {"seconds_left", to_seconds(n.deadline - now.wall)}});
  if (n.action == NoticeAction::kCheckpoint)
    return request_checkpoint(now, CheckpointKind::kAdvisory, reason,
                              now.wall + std::chrono::duration_cast<WallTime::duration>(cfg.commit_timeout));
  hook("preempt_notice", {{"reason", reason},
                          {"deadline_unix_ms", std::to_string(to_unix_ms(n.deadline))}});
  event::Notice copy = n;
  copy.detail = reason;
  if (n.source == "signal" && (n.kind == "sigterm" || n.kind == "sigint")) {
    // A person or a scheduler insisting: the second signal leaves only the safety margin,
    // the third stops now.
    if (stop_signals == 0 || now.steady - last_stop_signal >= std::chrono::seconds(1)) {
      ++stop_signals;
      last_stop_signal = now.steady;
    }
    if (stop_signals == 2) {
      const WallTime soon = now.wall + std::chrono::duration_cast<WallTime::duration>(cfg.safety_margin);
      copy.deadline = std::min(copy.deadline, soon);
      copy.detail = reason + " (again: only the safety margin is left)";
    } else if (stop_signals >= 3) {
      if (emergency && emergency->failure.empty() && !emergency->committed_step)
        emergency->failure = "stopped at once by a third " + n.kind;
      start_emergency(now, copy);
      return begin_teardown(now, "a third " + n.kind + ": stopping now");
    }
  }
  start_emergency(now, copy);
}

void AttemptMachine::Impl::on(Now now, const event::NodeUnhealthy& e) {
  record("node_unhealthy", {{"node", uint64_t{e.node}}, {"evidence", e.evidence}});
  hook("node_unhealthy", {{"node", std::to_string(e.node)}, {"evidence", e.evidence}});
  node_unhealthy = true;
  event::Notice n;
  n.node = e.node;
  n.source = "health";
  n.kind = "node-unhealthy";
  n.detail = "node-unhealthy";
  n.deadline = e.deadline;
  n.preemption = false;
  start_emergency(now, n);
}

// `n.detail` holds the reason text.
void AttemptMachine::Impl::start_emergency(Now now, const event::Notice& n) {
  if (emergency) emergency->notices.push_back(n);
  if (emergency) {
    emergency->nodes.insert(n.node);
    if (n.id != 0) emergency->notice_ids.push_back(n.id);
    if (n.deadline >= emergency->deadline) return;
    emergency->deadline = n.deadline;
    record("deadline_shortened", {{"reason", n.detail},
                                  {"deadline_unix_ms", to_unix_ms(n.deadline)},
                                  {"seconds_left", to_seconds(n.deadline - now.wall)}});
    if (!attempt || attempt->tearing_down || emergency->committed_step) return;
    if (request && request->kind == CheckpointKind::kEmergency) {
      arm_deadline(now);
      issue(now, "an earlier deadline: " + n.detail);
    }
    return;
  }
  emergency.emplace();
  emergency->notices.push_back(n);
  emergency->reason = n.detail;
  emergency->node = n.node;
  emergency->nodes.insert(n.node);
  emergency->deadline = n.deadline;
  emergency->preemption = n.preemption;
  if (n.id != 0) emergency->notice_ids.push_back(n.id);
  switch (phase) {
    case Phase::kPending:
    case Phase::kBackoff:
      emergency->failure = "no ranks were running";
      return finish(now, command::FinalState::kPreempted, kExitPreempted, emergency_summary());
    default: break;
  }
  if (!attempt || !attempt->launched) {
    emergency->failure = "no ranks were running";
    return finish(now, command::FinalState::kPreempted, kExitPreempted, emergency_summary());
  }
  if (attempt->tearing_down) {
    emergency->failure = "the ranks were already being stopped";
    return;
  }
  emergency->requested = true;
  request = PendingRequest{CheckpointKind::kEmergency, add_sat(known_max_step(), margin(now)),
                           WallTime{}, n.detail};
  phase = Phase::kCheckpointing;
  arm_deadline(now);
  issue(now, "");
}

// The ranks must be done by the deadline minus the safety margin; when that is already past,
// they get until the deadline itself, and when that is past too, the safety margin from now:
// an attempt costs nothing, and the machine goes away at its time regardless.
void AttemptMachine::Impl::arm_deadline(Now now) {
  const auto margin_wall = std::chrono::duration_cast<WallTime::duration>(cfg.safety_margin);
  WallTime d = emergency->deadline - margin_wall;
  if (d <= now.wall) d = emergency->deadline;
  if (d <= now.wall) d = now.wall + margin_wall;
  if (request) request->deadline = d;
  arm(TimerId::kDeadline, steady_at(now, d));
}

std::string AttemptMachine::Impl::emergency_summary() const {
  if (emergency && emergency->committed_step)
    return "emergency checkpoint of step " + std::to_string(*emergency->committed_step) +
           " committed";
  const std::string from = any_committed ? "step " + std::to_string(last_committed)
                                         : std::string("a fresh start");
  if (emergency && !emergency->requested)
    return "stopped while no ranks were running, nothing to save; resume will start from " + from;
  const std::string why =
      emergency && !emergency->failure.empty() ? emergency->failure : "not committed in time";
  return "emergency checkpoint FAILED: " + why + "; resume will start from " + from + ", " +
         std::to_string(last_attempt_lost) + " steps lost";
}

}  // namespace shardguard::supervisor
