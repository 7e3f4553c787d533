// The agent's health-check settings: which checks run, how often, how many failures make a
// node unhealthy, and the thresholds and paths of each check. Parsed elsewhere (the [health]
// section of a job or agent config); make_health_monitor() (health_setup.h) builds the
// checks from it. Plain values.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/clock.h"

namespace shardguard::agent {

// When and how strictly the monitor runs one check (as mesos/envoy health checkers).
struct CheckPolicy {
  Duration interval = std::chrono::seconds(30);  // between the end of a run and the next
  double jitter = 0.1;        // each interval is drawn from interval * [1 - jitter, 1 + jitter]
  Duration initial_delay{0};  // before the first run
  // Failures before start + start_grace do not count, unless fatal; the first success ends
  // the grace early.
  Duration start_grace = std::chrono::seconds(60);
  int failure_threshold = 3;  // consecutive warning-level failures before unhealthy
  int success_threshold = 1;  // consecutive successes before a warning-unhealthy check recovers
  Duration timeout = std::chrono::seconds(60);  // a run that has not answered by then failed
  // false: warning-level findings are logged and counted, never make the node unhealthy
  // (only a fatal one does).
  bool warnings_make_unhealthy = true;
};

// A command run as a check: exit 0 is healthy, anything else (or the timeout) a failure.
struct CommandCheckSettings {
  std::string name;                               // the check is "command:<name>"
  std::vector<std::string> argv;                  // argv[0] is looked up in PATH when it has no '/'
  Duration timeout = std::chrono::seconds(30);    // then the process group is killed
  Duration kill_grace = std::chrono::seconds(2);  // SIGTERM -> SIGKILL at the timeout
  std::string output_file;                        // stdout+stderr appended here; empty: /dev/null
  CheckPolicy policy;
};

struct HealthSettings {
  bool enabled = true;

  // GPU through NVML, loaded at run time (a machine without it reports "not available").
  bool gpu = true;
  std::string nvml_library = "libnvidia-ml.so.1";
  int expected_gpus = -1;  // -1: as many as the first look that found any; 0: no count check
  CheckPolicy gpu_policy;

  // XIDs from the kernel log.
  bool xid = true;
  std::string kernel_log;              // empty: /dev/kmsg; otherwise a text log file
  bool kernel_log_from_start = false;  // also report XIDs logged before the agent started
  std::vector<int> xid_extra_fatal;    // beyond the built-in table (e.g. a site's own list)
  std::vector<int> xid_extra_ignored;  // never act on these
  CheckPolicy xid_policy = [] {
    CheckPolicy p;
    p.interval = std::chrono::seconds(5);  // cheap; a fatal XID should be seen quickly
    return p;
  }();

  // Free space under the checkpoint directory.
  bool disk = true;
  std::string checkpoint_dir;  // empty: the disk check is not available
  uint64_t disk_warning_bytes = 10ull << 30;
  uint64_t disk_fatal_bytes = 0;  // 0: fatal only below one checkpoint (its size known)
  uint64_t checkpoint_size_estimate = 0;  // 0: unknown; else warn below headroom x this
  double checkpoint_headroom = 2.0;
  // The disk's warnings (below disk_warning, below one or two checkpoints) only warn: a full
  // checkpoint disk is the run's to handle (retention makes room, or the run stops with 78
  // when the disk can never hold one more); moving the job to another node with an
  // emergency checkpoint does not give it a larger checkpoint volume. disk_fatal is fatal.
  CheckPolicy disk_policy = [] {
    CheckPolicy p;
    p.warnings_make_unhealthy = false;
    return p;
  }();

  // Memory pressure.
  bool memory = true;
  std::string meminfo_path = "/proc/meminfo";
  std::string memory_psi_path = "/proc/pressure/memory";  // missing file: PSI not used
  double memory_available_fraction = 0.05;  // warn when MemAvailable / MemTotal is below
  double memory_psi_some_avg10 = 25.0;      // warn when "some avg10" (percent) is above; 0: off
  CheckPolicy memory_policy;

  std::vector<CommandCheckSettings> commands;
};

}  // namespace shardguard::agent
