// The AttemptMachine's timers: hangs (no heartbeat for hang_timeout, or none at all within
// startup_timeout), time-based checkpoints, the emergency deadline, backoff, rendezvous.
// One health timer is armed for the earliest moment a rank could be declared hung; heartbeats
// do not re-arm it, the check does.
#include <algorithm>

#include "core/exit_codes.h"
#include "supervisor/attempt_machine.h"
#include "supervisor/attempt_machine_impl.h"

namespace shardguard::supervisor {

void AttemptMachine::Impl::on(Now now, const event::TimerFired& e) {
  if (armed.erase(e.id) == 0) return;  // cancelled meanwhile
  switch (e.id) {
    case TimerId::kBackoff:
      if (placeable_nodes().size() >= cfg.min_nodes) return begin_attempt(now);
      // Said, so that `status` shows a job waiting for nodes, not one in backoff.
      record("waiting_for_nodes", {{"nodes", uint64_t(placeable_nodes().size())},
                                   {"min_nodes", uint64_t{cfg.min_nodes}}});
      phase = Phase::kPending;
      return maybe_begin(now);
    case TimerId::kDeadline:
      if (!attempt || attempt->tearing_down) return;
      if (emergency && emergency->failure.empty())
        emergency->failure =
            "not committed before the deadline (" +
            (request ? unfinished_part(request->at_step) : std::string("no save asked")) + ")";
      return begin_teardown(now, "emergency deadline reached");
    case TimerId::kDrain:
      return begin_teardown(now, "ranks did not exit after the emergency checkpoint");
    case TimerId::kHealth:
      return check_health(now);
    case TimerId::kPeriodic:
      if (phase == Phase::kRunning && !request)
        request_checkpoint(now, CheckpointKind::kPeriodic, "periodic",
                           now.wall + std::chrono::duration_cast<WallTime::duration>(cfg.commit_timeout));
      return arm_periodic(now);
    case TimerId::kJoinWindow:
      if (phase == Phase::kPending && placeable_nodes().size() >= cfg.min_nodes) begin_attempt(now);
      return;
    case TimerId::kRendezvous:
      if (phase != Phase::kPending || placeable_nodes().size() >= cfg.min_nodes) return;
      return finish(now, command::FinalState::kPreempted, kExitPreempted,
                    "waited " + seconds_text(cfg.rendezvous_timeout) + " for " +
                        std::to_string(cfg.min_nodes) + " node(s); " +
                        std::to_string(placeable_nodes().size()) + " available");
    case TimerId::kRejoin:
      // Nodes of the adopted epoch that did not come back are lost; the rest carry on.
      if (!attempt) return;
      for (const auto& slot : std::vector<NodeSlot>(attempt->layout)) {
        auto it = std::find_if(members.begin(), members.end(),
                               [&](const NodeMember& m) { return m.node == slot.node; });
        if (it == members.end() || !it->alive)
          lose_placed_node(now, slot.node, "did not come back to the new coordinator within " +
                                               seconds_text(cfg.rejoin_window));
      }
      return;
    case TimerId::kStopTimeout:
      if (!attempt || !attempt->tearing_down) return;
      for (const auto& slot : attempt->layout) {
        if (attempt->nodes_stopped.contains(slot.node)) continue;
        record("node_lost", {{"node", uint64_t{slot.node}},
                             {"why", "did not confirm the teardown within " +
                                         seconds_text(cfg.stop_timeout)}});
        for (auto& m : members)
          if (m.node == slot.node) m.alive = false;
        attempt->nodes_stopped.insert(slot.node);
        attempt->node_lost = true;
      }
      return attempt_ended(now);
  }
}

void AttemptMachine::Impl::arm_health(Now now) {
  if (!attempt || !attempt->launched || attempt->tearing_down) return;
  std::optional<SteadyTime> next;
  auto consider = [&](SteadyTime t) { next = next ? std::min(*next, t) : t; };
  for (const auto& r : attempt->ranks) {
    if (r.exit) continue;
    if (r.heartbeated) {
      if (cfg.hang_timeout.count() > 0)
        consider(r.last_heartbeat + cfg.hang_timeout + (r.saving ? cfg.commit_timeout : Duration{0}));
    } else if (cfg.startup_timeout.count() > 0) {
      consider(attempt->start + cfg.startup_timeout);
    }
  }
  if (next) arm(TimerId::kHealth, std::max(*next, now.steady));
}

void AttemptMachine::Impl::check_health(Now now) {
  if (!attempt || !attempt->launched || attempt->tearing_down) return;
  AttemptState& a = *attempt;
  for (uint32_t rank = 0; rank < a.world_size; ++rank) {
    const RankView& r = a.ranks[rank];
    if (r.exit) continue;
    std::string why;
    if (r.heartbeated && cfg.hang_timeout.count() > 0) {
      const Duration limit = cfg.hang_timeout + (r.saving ? cfg.commit_timeout : Duration{0});
      if (now.steady - r.last_heartbeat < limit) continue;
      why = "rank " + std::to_string(rank) + " hung";
    } else if (!r.heartbeated && cfg.startup_timeout.count() > 0) {
      if (now.steady - a.start < cfg.startup_timeout) continue;
      why = "rank " + std::to_string(rank) + " sent no heartbeat within startup_timeout (" +
            seconds_text(cfg.startup_timeout) + ")";
    } else {
      continue;
    }
    a.hang_detected = true;
    const SteadyTime since = r.heartbeated ? r.last_heartbeat : a.start;
    record("hang", {{"attempt", a.epoch}, {"rank", uint64_t{rank}}, {"step", r.step},
                    {"seconds_since_heartbeat", to_seconds(now.steady - since)}});
    out.push_back(command::CollectHangReport{a.epoch, rank});
    return begin_teardown(now, why);
  }
  arm_health(now);
}

Duration AttemptMachine::Impl::periodic_interval(Now now) const {
  if (cfg.interval_mode == IntervalMode::kTime) return cfg.every;
  return policies::young_daly_interval(cost.estimate(std::chrono::seconds(10)),
                                       failure_rate.mtbf(now.steady, cfg.mtbf));
}

void AttemptMachine::Impl::arm_periodic(Now now) {
  if (cfg.interval_mode == IntervalMode::kSteps || !attempt || attempt->tearing_down) return;
  arm(TimerId::kPeriodic, now.steady + periodic_interval(now));
}

}  // namespace shardguard::supervisor
