#include "supervisor/machine_metrics.h"

#include <chrono>

namespace shardguard::supervisor {

std::string machine_metrics(const MachineStats& s) {
  std::string out;
  auto line = [&](const std::string& text) { out += text + "\n"; };
  line("# HELP shardguard_restarts_total Restarts by exit class.");
  line("# TYPE shardguard_restarts_total counter");
  for (const char* c : {"preempted", "infrastructure", "hang", "crash", "no_progress", "no_space",
                        "resume_failed", "resize", "divergence"}) {
    auto it = s.restarts.find(c);
    line(std::string("shardguard_restarts_total{class=\"") + c + "\"} " +
         std::to_string(it == s.restarts.end() ? 0 : it->second));
  }
  line("# TYPE shardguard_attempt gauge");
  line("shardguard_attempt " + std::to_string(s.epoch));
  line("# TYPE shardguard_last_committed_step gauge");
  line("shardguard_last_committed_step " + std::to_string(s.last_committed_step));
  line("# TYPE shardguard_lost_steps_total counter");
  line("shardguard_lost_steps_total " + std::to_string(s.lost_steps));
  line("# TYPE shardguard_checkpoint_seconds summary");
  line("shardguard_checkpoint_seconds_sum " + std::to_string(s.checkpoint_seconds));
  line("shardguard_checkpoint_seconds_count " + std::to_string(s.checkpoints));
  line("# HELP shardguard_save_window_seconds The time an emergency save gets: the shortest "
       "notice less the safety margin (0: none configured).");
  line("# TYPE shardguard_save_window_seconds gauge");
  line("shardguard_save_window_seconds " + std::to_string(s.save_window_seconds));
  line("# HELP shardguard_save_window_fraction The last save's time over that window (over 0.5 "
       "warns).");
  line("# TYPE shardguard_save_window_fraction gauge");
  line("shardguard_save_window_fraction " + std::to_string(s.save_window_fraction));
  line("# TYPE shardguard_nodes gauge");
  line("shardguard_nodes " + std::to_string(s.nodes));
  line("# TYPE shardguard_world_size gauge");
  line("shardguard_world_size " + std::to_string(s.world_size));
  line("# HELP shardguard_running_seconds_total Time with the ranks launched, over all attempts.");
  line("# TYPE shardguard_running_seconds_total counter");
  line("shardguard_running_seconds_total " +
       std::to_string(std::chrono::duration<double>(s.running_time).count()));
  return out;
}

}  // namespace shardguard::supervisor
