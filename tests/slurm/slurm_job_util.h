// shardguard jobs on the real Slurm of tests/support/slurm_cluster.h: the shipped
// examples/slurm/train.sbatch submitted as it is (its knobs set through sbatch's --export),
// the example trainer (or any command) as the ranks, a fast job config in a temp dir, and
// readers of the run's events and final weights. One node by default; `-N2` in the sbatch
// arguments runs the same script on two nodes (each logs in <run dir>/node<k>).
#pragma once

#include <catch2/catch.hpp>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/run/run_fixture.h"
#include "tests/slurm/slurm_test_util.h"

namespace shardguard::testing {

inline std::string source_dir() {
  const char* s = std::getenv("SHARDGUARD_SOURCE_DIR");
  return s ? s : ".";
}

// A script of examples/slurm/ (the one-node train.sbatch by default), as shipped.
inline std::string shipped_script(const std::string& name = "train.sbatch") {
  const std::string text = slurp(source_dir() + "/examples/slurm/" + name);
  if (text.empty()) FAIL("cannot read examples/slurm/" << name << " under " << source_dir());
  return text;
}

// `script` without its lines that start with `prefix` (e.g. "#SBATCH --signal").
inline std::string without_lines(const std::string& script, const std::string& prefix) {
  std::istringstream in(script);
  std::string out;
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) != 0) out += line + "\n";
  return out;
}

// One shardguard job: its directories, config and the command its ranks run.
struct SlurmRun {
  RunDirs dirs;
  std::vector<std::string> command;  // the ranks' command (default: the example trainer)
  std::vector<std::string> exports;  // more "K=V" for the job's environment

  // `job_extra`: more lines of the [job] table (e.g. "master_port = 24000\n").
  explicit SlurmRun(std::vector<std::string> trainer_args, std::string config_extra = "",
                    std::string job_extra = "") {
    command = {trainer_bin()};
    command.insert(command.end(), trainer_args.begin(), trainer_args.end());
    // [stop] grace below the fixture's KillWait and GraceTime (5 s).
    std::ofstream(dirs.config()) << "[job]\nnproc = 2\ncheckpoint_dir = \"" << dirs.ckpt()
                                 << "\"\nrun_dir = \"" << dirs.run() << "\"\n"
                                 << job_extra << "[checkpoint]\nevery_steps = 100\n"
                                 << "[restart]\nbackoff_initial = \"10ms\"\n"
                                 << "[stop]\ngrace = \"4s\"\nterm_grace = \"2s\"\n"
                                 << config_extra;
  }

  // sbatch arguments that point the shipped script at this run (before `extra`).
  std::vector<std::string> sbatch_args(const std::vector<std::string>& extra = {}) const {
    std::string args;
    for (size_t i = 1; i < command.size(); ++i) args += (i > 1 ? " " : "") + command[i];
    std::string e = "--export=ALL,SG_BIN=" + shardguard_bin() + ",SG_CONFIG=" + dirs.config() +
                    ",SG_RUN_DIR=" + dirs.run() + ",SG_TRAINER=" + command[0] +
                    ",SG_TRAINER_ARGS=" + args;
    for (const auto& x : exports) e += "," + x;
    std::vector<std::string> out = {e};
    out.insert(out.end(), extra.begin(), extra.end());
    return out;
  }

  std::vector<supervisor::EventRecord> events() const { return events_of(dirs); }
  std::vector<supervisor::EventRecord> named(const std::string& type) const {
    return events_named(dirs, type);
  }
  std::string events_text() const { return slurp(dirs.run() + "/events.jsonl"); }

  // Waits until the ranks said hello `count` times in all (every attempt counts).
  void wait_hellos(size_t count, std::chrono::seconds timeout) const {
    if (!eventually([&] { return named("hello").size() >= count; }, timeout))
      FAIL("fewer than " << count << " hellos within " << timeout.count() << " s\n"
                         << events_text());
  }
  void wait_event(const std::string& type, size_t count, std::chrono::seconds timeout) const {
    if (!eventually([&] { return named(type).size() >= count; }, timeout))
      FAIL("fewer than " << count << " '" << type << "' events within " << timeout.count() << " s\n"
                         << events_text());
  }
};

// The fields of the last event `type` ("" when none).
inline std::string last_field(const SlurmRun& r, const std::string& type, const std::string& key) {
  auto e = r.named(type);
  return e.empty() ? std::string() : field(e.back(), key);
}

// Waits for the job to end COMPLETED; prints its output and the run's events otherwise.
inline SlurmJob wait_completed(const SlurmCluster& c, uint32_t id, const SlurmRun& run,
                               std::chrono::seconds timeout) {
  auto j = c.wait_job_state(
      id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL"}, timeout);
  INFO("job output:\n" << slurp(c.job_output_path(id)) << "\nevents:\n" << run.events_text());
  if (!j.ok()) FAIL(j.error().message() << "\n" << c.ctld_log_tail(3000));
  CHECK(j->state() == "COMPLETED");
  return *j;
}

// The final weights of the same training without interruptions (one rank, no supervisor):
// --sleep-ms only slows the steps, so the reference runs without it.
inline std::string uninterrupted_hash(std::vector<std::string> trainer_args) {
  for (size_t i = 0; i + 1 < trainer_args.size(); ++i)
    if (trainer_args[i] == "--sleep-ms")
      trainer_args.erase(trainer_args.begin() + i, trainer_args.begin() + i + 2);
  return reference_hash(trainer_args);
}

// A line per Slurm decision of the run, for the test's output (ctest -V).
inline void print_decisions(const std::string& title, const SlurmRun& r) {
  std::cout << "--- " << title << "\n";
  for (const auto& e : r.events()) {
    if (e.type.rfind("slurm_", 0) != 0 && e.type != "notice" && e.type != "checkpoint_committed" &&
        e.type != "launch" && e.type != "finish" && e.type != "rank_signal")
      continue;
    std::cout << e.time_unix_ms << " " << e.type;
    for (const auto& [k, v] : e.fields) std::cout << " " << k << "=" << v;
    std::cout << "\n";
  }
  std::cout << std::flush;
}

}  // namespace shardguard::testing
