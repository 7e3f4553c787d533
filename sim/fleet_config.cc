#include "sim/fleet_config.h"

#include <algorithm>
#include <set>

namespace shardguard::sim {

std::vector<Policy> default_policies(const JobShape& job) {
  using policies::IntervalMode;
  std::vector<Policy> p(4);
  p[0].name = "periodic-30m";
  p[0].interval = IntervalMode::kTime;
  p[0].every = 1800;
  p[0].emergency = false;
  p[1].name = "auto";
  p[1].emergency = false;
  p[2].name = "auto+notice";  // shardguard's policy: Young/Daly + emergency checkpoints
  p[3].name = "auto+notice+elastic";
  // Shrink by up to 1/16 of the nodes (8 of 128) before waiting for replacements.
  p[3].min_nodes = job.nodes - std::max<uint32_t>(1, job.nodes / 16);
  if (job.nodes <= 1) p.pop_back();
  return p;
}

Status validate(const FleetConfig& c) {
  auto bad = [&](const std::string& what) {
    return Error(ErrorCode::kInvalid, c.source + ": " + what);
  };
  if (c.job.nodes == 0 || c.job.gpus_per_node == 0) return bad("job: no GPUs");
  if (!(c.job.step_seconds > 0)) return bad("job.step_time: must be positive");
  if (!(c.duration > 0)) return bad("simulation.duration: must be positive");
  if (c.policies.empty()) return bad("no [[policy]] to simulate");
  std::set<std::string> names;
  for (const Policy& p : c.policies) {
    if (p.name.empty()) return bad("policy: every [[policy]] needs a name");
    if (!names.insert(p.name).second) return bad("policy '" + p.name + "': the name is used twice");
    if (p.min_nodes > c.job.nodes)
      return bad("policy '" + p.name + "': min_nodes " + std::to_string(p.min_nodes) +
                 " is above the job's " + std::to_string(c.job.nodes) + " nodes");
    if (p.interval == policies::IntervalMode::kTime && !(p.every > 0))
      return bad("policy '" + p.name + "': interval = \"time\" needs every > 0");
  }
  if (!c.sweep.base.empty() && !names.contains(c.sweep.base))
    return bad("sweep.policy: no [[policy]] is named '" + c.sweep.base + "'");
  for (double i : c.sweep.intervals)
    if (!(i > 0)) return bad("sweep.intervals: every interval must be positive");
  return ok_status();
}

}  // namespace shardguard::sim
