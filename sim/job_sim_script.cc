// Replayed disruptions (SimOptions::script): each is armed by its anchor in an attempt newer
// than the one the previous disruption hit, applied `after` seconds later, and measured as a
// test harness measures a real run: the machine's lost steps for the attempt it ended, and
// the time until the next attempt's ranks were ready.
#include <cmath>

#include "sim/job_sim_impl.h"

namespace shardguard::sim {

void JobSim::script_anchor(ScriptedDisruption::Anchor anchor) {
  if (script_armed_ || script_next_ >= options_.script.size() || !attempt_) return;
  const ScriptedDisruption& d = options_.script[script_next_];
  if (d.anchor != anchor) return;
  if (script_last_epoch_ && attempt_->epoch <= *script_last_epoch_) return;
  script_armed_ = true;
  schedule(t_ + d.after, SimKind::kScript, attempt_->epoch, 0, script_next_);
}

void JobSim::script_apply(uint64_t index) {
  script_armed_ = false;
  if (!attempt_ || !attempt_->running()) return;  // re-armed by the next anchor
  const ScriptedDisruption& d = options_.script[index];
  AttemptModel& a = *attempt_;
  const Epoch epoch = a.epoch;
  result_.disruptions.push_back({t_, epoch, 0, -1});
  script_last_epoch_ = epoch;
  ++script_next_;
  heartbeat(false);
  if (d.action == ScriptedDisruption::Action::kKill) {
    rank_died();
    return feed(
        event::RankExited{epoch, d.rank, true, 0, 9, false, "killed by signal 9 (SIGKILL)"});
  }
  event::Notice n;
  n.node = a.nodes.front();
  n.source = "signal";
  n.kind = "sigterm";
  n.deadline = now().wall + std::chrono::duration_cast<WallTime::duration>(
                                std::chrono::duration<double>(d.lead));
  n.id = ++notice_ids_;
  ++result_.notices;
  feed(n);
}

void JobSim::script_ready() {
  for (auto& d : result_.disruptions)
    if (d.downtime < 0) d.downtime = t_ - d.at;
}

RunResult simulate_run(const FleetConfig& config, const Policy& policy, const FleetTimeline& fleet,
                       uint64_t seed, const SimOptions& options) {
  return JobSim(config, policy, fleet, seed, options).run();
}

}  // namespace shardguard::sim
