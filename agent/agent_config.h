// The agent's settings: which notice sources to run and where they point. Parsed from the
// [agent] section of a job config (embedded agent) or an agent config (standalone).
// Plain values.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "core/clock.h"

namespace shardguard::agent {

struct AgentSettings {
  // "none" (default: no metadata traffic), "auto" (probe the three clouds at start-up with
  // short timeouts), or one of "aws", "gcp", "azure".
  std::string clouds = "none";
  std::string aws_url;    // empty: the provider's link-local address
  std::string gcp_url;
  std::string azure_url;
  std::string azure_vm_name;  // empty: asked from IMDS
  Duration poll_interval{0};  // 0: each source's default
  // Signals that mean "checkpoint and stop" besides SIGTERM and SIGINT, e.g. SIGUSR1 from
  // Slurm's --signal; each gets `signal_grace`.
  std::vector<int> notice_signals;
  Duration signal_grace = std::chrono::seconds(30);
  // Standalone `shardguard agent` only: the run directories of local `shardguard run`s that
  // get every notice (through each run's agent socket).
  std::vector<std::string> run_dirs;
};

}  // namespace shardguard::agent
