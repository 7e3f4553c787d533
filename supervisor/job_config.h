// The job's configuration: one TOML file per job (`shardguard run --config job.toml`),
// overridden by flags. Durations are strings like "30s", sizes like "50GiB". Unknown keys
// and bad values are errors naming the file, line and key (supervisor/job_config_toml.cc).
// Thread-safety: plain values.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent_config.h"
#include "agent/health/health_config.h"
#include "core/clock.h"
#include "hooks/lifecycle.h"
#include "policies/checkpoint_interval.h"
#include "policies/divergence_guard.h"
#include "storage/location.h"
#include "storage/s3/s3_options.h"

namespace shardguard::supervisor {

using IntervalMode = policies::IntervalMode;
enum class VerifyMode { kSize, kChecksum };

struct RestartBudget {
  uint32_t max_restarts = 3;                   // within `window`
  Duration window = std::chrono::hours(1);
};

struct JobConfig {
  // [job]
  std::string job_id;                  // empty: the checkpoint directory's own (or a new one)
  bool resume_from_job = false;        // take the directory over from another job id
  // `run --resume-from STEP`: a forced rollback; every newer step is quarantined at start
  // (so a later crash cannot undo it). "none" with `fresh`: every step is set aside.
  std::optional<uint64_t> resume_from_step;
  bool resume_from_none = false;
  bool fresh = false;
  std::vector<std::string> command;    // the rank command (after `--`)
  uint32_t nproc = 1;
  // Where checkpoints go: a directory, or s3://BUCKET/PREFIX (storage/location.h). Checked
  // when the config is read; checkpoint_location() is the typed form.
  std::string checkpoint_dir = "checkpoints";
  std::string run_dir = "shardguard-run";
  // The group given the run and checkpoint directories and what shardguard creates in them
  // (0750 directories with set-group-ID, 0640 files), so on-call engineers in it can run
  // `shardguard status` and read checkpoints. Unset: the user's own group.
  std::optional<uint32_t> group;
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 29500;
  std::map<std::string, std::string> env;  // extra environment for every rank

  // [storage]: how to reach the bucket of an s3:// checkpoint_dir (storage/s3/s3_options.h
  // has every key and its default); endpoint and region are resolved at start.
  storage::s3::S3Options storage;
  // A bucket's lease without a renewal this long (by the server's clock) is stale and may be
  // taken over (a directory's flock needs no timeout).
  Duration lease_timeout = std::chrono::seconds(15);

  // [checkpoint]
  IntervalMode interval_mode = IntervalMode::kSteps;
  uint64_t every_steps = 100;
  Duration every = std::chrono::minutes(30);      // kTime
  Duration mtbf = std::chrono::hours(4);           // kAuto: expected time between failures
  VerifyMode resume_verify = VerifyMode::kSize;
  uint32_t keep_last = 3;                         // retention (0: keep all)
  uint64_t keep_every = 0;
  // Quarantined steps are evidence: kept this long, then removed when a run starts.
  Duration quarantine_keep = std::chrono::hours(24 * 7);
  Duration commit_timeout = std::chrono::minutes(10);

  // [restart]
  RestartBudget crash{3, std::chrono::hours(1)};
  RestartBudget hang{3, std::chrono::hours(1)};
  RestartBudget infrastructure{5, std::chrono::hours(1)};
  RestartBudget preempted{100, std::chrono::hours(24)};
  RestartBudget no_space{3, std::chrono::hours(1)};       // saves failing on a full disk
  RestartBudget resume_failed{8, std::chrono::hours(1)};  // corrupt resume checkpoints
  Duration backoff_initial = std::chrono::seconds(1);
  Duration backoff_max = std::chrono::minutes(5);
  double backoff_multiplier = 2.0;
  double backoff_jitter = 0.2;                    // +-20%
  Duration healthy_after = std::chrono::minutes(10);  // a run this long resets the backoff
  uint32_t no_progress_limit = 3;                 // resumes of the same step before giving up
  // Runs in a row that exited 75 without committing anything before the next exits 78
  // ("requeue will not help"); kept in the checkpoint directory. 0: never.
  uint32_t futile_requeue_limit = 3;
  std::vector<int> preemption_exit_codes = {75};  // rank exit codes that mean "preempted"

  // [job] multi-node: a node whose coordinator stays away this long stops its ranks and exits
  // 75; a job below its minimum number of nodes this long exits 75.
  Duration coordinator_timeout = std::chrono::minutes(2);
  Duration rendezvous_timeout = std::chrono::minutes(10);

  // [health]
  Duration hang_timeout = std::chrono::minutes(5);  // no heartbeat this long after the first
  Duration startup_timeout = std::chrono::minutes(0);  // 0: no limit before the first

  // [health] node checks of the embedded agent (GPU, XIDs, disk, memory).
  agent::HealthSettings node_health;

  // [stop]
  int checkpoint_signal = 10;                     // SIGUSR1
  Duration grace = std::chrono::seconds(30);      // emergency budget on SIGTERM/SIGINT
  // Not a key: inside a Slurm job submitted with SBATCH_SIGNAL, its lead (the time from the
  // signal to the time limit), one of the windows an emergency save must fit.
  std::optional<Duration> slurm_signal_lead;
  Duration safety_margin = std::chrono::seconds(2);  // deadline minus this
  // Teardown: `stop` on the control socket, then SIGKILL of what is left after this long.
  Duration term_grace = std::chrono::seconds(3);

  // [[hooks]]: commands and webhooks run on lifecycle events.
  std::vector<hooks::HookSpec> hooks;

  // [agent]: notice sources of the embedded agent.
  agent::AgentSettings agent;

  // [metrics]
  uint16_t metrics_port = 0;  // 0: off
  // IP address the metrics endpoint binds to ("0.0.0.0" to be scraped from another host);
  // empty: SHARDGUARD_METRICS_ADDRESS, else 127.0.0.1.
  std::string metrics_address;

  // [guard]: the divergence guard (policies/divergence_guard.h). It acts on the scalars the
  // job reports with its heartbeats (loss, grad_norm); a job that reports none is not guarded.
  policies::GuardOptions guard;

  // [log]: applied by `shardguard run` and `shardguard agent` (cli/main.cc) unless
  // --log-format / --log-level are given; SHARDGUARD_LOG_FORMAT / _LEVEL override both.
  std::string log_format = "text";
  std::string log_level = "info";
};

// The typed form of checkpoint_dir; kInvalid names the text and what is wrong with it.
inline Result<storage::Location> checkpoint_location(const JobConfig& c) {
  return storage::Location::parse(c.checkpoint_dir);
}

}  // namespace shardguard::supervisor
