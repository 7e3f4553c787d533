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
  // "auto" (default: the cloud this machine's DMI data names, agent/cloud_identify.h; a
  // machine that is no cloud's sends no metadata traffic), "none", or one of "aws", "gcp",
  // "azure".
  std::string clouds = "auto";
  // Where "auto" reads the DMI data; empty: $SHARDGUARD_DMI_DIR, else /sys/class/dmi/id.
  std::string dmi_dir;
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
