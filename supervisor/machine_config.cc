#include "supervisor/machine_config.h"

namespace shardguard::supervisor {

MachineConfig machine_config(const JobConfig& c) {
  auto budget = [](const RestartBudget& r) { return policies::Budget{r.max_restarts, r.window}; };
  MachineConfig m;
  m.nproc_per_node = c.nproc;
  m.min_nodes = m.max_nodes = 1;
  m.master_addr = c.master_addr;
  m.master_port = c.master_port;
  m.restart.crash = budget(c.crash);
  m.restart.hang = budget(c.hang);
  m.restart.infrastructure = budget(c.infrastructure);
  m.restart.preempted = budget(c.preempted);
  m.restart.no_space = budget(c.no_space);
  m.restart.resume_failed = budget(c.resume_failed);
  m.restart.no_progress_limit = c.no_progress_limit;
  m.backoff = {c.backoff_initial, c.backoff_max, c.backoff_multiplier, c.backoff_jitter};
  m.healthy_after = c.healthy_after;
  m.preemption_exit_codes = c.preemption_exit_codes;
  m.hang_timeout = c.hang_timeout;
  m.startup_timeout = c.startup_timeout;
  m.commit_timeout = c.commit_timeout;
  // Long enough for the stop message, the term grace and the kill itself.
  m.stop_timeout = c.term_grace + std::chrono::seconds(30);
  m.safety_margin = c.safety_margin;
  m.save_window.stop_grace = c.grace;
  m.save_window.slurm_signal_lead = c.slurm_signal_lead;
  m.save_window.safety_margin = c.safety_margin;
  // An unknown setting is the config loader's error to report; here it watches nothing.
  if (auto clouds = policies::clouds_from_setting(c.agent.clouds); clouds.ok())
    m.save_window.clouds = *clouds;
  m.rendezvous_timeout = c.rendezvous_timeout;
  m.interval_mode = c.interval_mode;
  m.every = c.every;
  m.mtbf = c.mtbf;
  m.guard = c.guard;
  return m;
}

}  // namespace shardguard::supervisor
