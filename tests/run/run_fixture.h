// Drives `shardguard run` over the example trainer as real processes, in a temp directory:
// writes a job config, starts the run, reads its events and checkpoint hashes.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include "supervisor/event_log.h"
#include "tests/support/background.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"

namespace shardguard::testing {

inline std::string trainer_bin() {
  const char* b = std::getenv("SG_TRAINER_BIN");
  return b ? b : "sg_trainer";
}

struct RunDirs {
  TempDir tmp;
  std::string ckpt() const { return tmp / "ckpt"; }
  std::string run() const { return tmp / "run"; }
  std::string config() const { return tmp / "job.toml"; }
  std::string log() const { return tmp / "shardguard.log"; }
};

// A config with fast restarts and checkpoints every `every_steps`; `extra` is appended
// (TOML tables other than the ones written here).
inline void write_config(const RunDirs& d, const std::string& extra = "", int every_steps = 50) {
  std::ofstream(d.config()) << "[job]\n"
                            << "checkpoint_dir = \"" << d.ckpt() << "\"\n"
                            << "run_dir = \"" << d.run() << "\"\n"
                            << "[restart]\nbackoff_initial = \"10ms\"\nbackoff_max = \"50ms\"\n"
                            << "[stop]\nterm_grace = \"2s\"\n"
                            << "[checkpoint]\nevery_steps = " << every_steps << "\n"
                            << extra;
}

inline std::vector<std::string> run_argv(const RunDirs& d, uint32_t nproc,
                                         const std::vector<std::string>& trainer_args) {
  std::vector<std::string> argv = {shardguard_bin(), "run", "--config", d.config(), "--nproc",
                                   std::to_string(nproc), "--", trainer_bin()};
  argv.insert(argv.end(), trainer_args.begin(), trainer_args.end());
  return argv;
}

inline std::vector<supervisor::EventRecord> events_of(const RunDirs& d) {
  auto e = supervisor::read_events(d.run() + "/events.jsonl");
  return e.ok() ? *e : std::vector<supervisor::EventRecord>{};
}

inline std::string field(const supervisor::EventRecord& e, const std::string& key) {
  for (const auto& [k, v] : e.fields)
    if (k == key) return v;
  return "";
}

inline std::vector<supervisor::EventRecord> events_named(const RunDirs& d, const std::string& type) {
  std::vector<supervisor::EventRecord> out;
  for (auto& e : events_of(d))
    if (e.type == type) out.push_back(e);
  return out;
}

// `shardguard ckpt inspect --hash` of the newest complete checkpoint.
inline std::string final_hash(const std::string& ckpt_dir) {
  return run_command(shardguard_bin() + " ckpt inspect --hash " + ckpt_dir).out;
}

// The hash of the same training run without interruptions (one rank, no supervisor).
inline std::string reference_hash(const std::vector<std::string>& trainer_args) {
  TempDir ref;
  std::string cmd = trainer_bin() + " --checkpoint-dir " + ref.path() + "/ckpt";
  for (const auto& a : trainer_args) cmd += " " + a;
  auto r = run_command(cmd);
  if (r.exit_code != 0) return "reference run failed: " + r.err;
  return final_hash(ref.path() + "/ckpt");
}

}  // namespace shardguard::testing
