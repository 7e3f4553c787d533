// The shipped examples/slurm/train.sbatch as a multi-node job of the real Slurm fixture
// (`sbatch -N2`): the example trainer as `nproc` ranks per node that all-reduce every step
// across the nodes (--allreduce), each node's events in <run dir>/node<k>, the final weights
// compared with the same training as one uninterrupted `shardguard run` of the same world size.
// Shared by the 2-node tests (slurm_multinode_test, slurm_multinode_stop_test,
// slurm_multinode_fault_test). Thread-safety: one test thread.
#pragma once

#include <iostream>
#include <string>
#include <vector>

#include "tests/multinode/checks.h"
#include "tests/multinode/cluster.h"
#include "tests/slurm/slurm_job_util.h"

namespace shardguard::testing {

namespace mn = shardguard::testing::multinode;

inline std::vector<std::string> allreduce_train(int steps, int sleep_ms) {
  return {"--steps",    std::to_string(steps),    "--rows",     "64", "--log-every", "0",
          "--sleep-ms", std::to_string(sleep_ms), "--allreduce"};
}

// The same training as `world` ranks of one uninterrupted `shardguard run` (all-reduce results
// depend on the world size); --sleep-ms only slows the steps.
inline std::string allreduce_reference(std::vector<std::string> args, uint32_t world) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--sleep-ms") args.erase(args.begin() + i, args.begin() + i + 2);
  return mn::allreduce_reference(args, world);
}

// A 2-node run of the shipped script: its own coordinator port and MASTER_PORT block (tests
// and clusters run side by side, and Slurm's default port depends only on the job id).
struct MultiNodeRun {
  SlurmRun run;
  explicit MultiNodeRun(const std::vector<std::string>& args, const std::string& config_extra = "")
      : run(args, config_extra, "master_port = " + std::to_string(mn::free_port_block(12)) + "\n") {
    run.exports.push_back("SHARDGUARD_RDZV_PORT=" + std::to_string(mn::free_port_block(1)));
  }
  std::vector<std::string> sbatch_args(const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> a = {"-N2"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run.sbatch_args(a);
  }
  std::string node_dir(int k) const { return run.dirs.run() + "/node" + std::to_string(k); }
  std::vector<supervisor::EventRecord> events(int k) const {
    auto e = supervisor::read_events(node_dir(k) + "/events.jsonl");
    return e.ok() ? *e : std::vector<supervisor::EventRecord>{};
  }
  std::vector<supervisor::EventRecord> named(int k, const std::string& type) const {
    return mn::of_type(events(k), type);
  }
  std::string text(int k) const { return slurp(node_dir(k) + "/events.jsonl"); }
  std::string texts() const {
    return "node 0 events:\n" + text(0) + "\nnode 1 events:\n" + text(1);
  }
  void wait(int k, const std::string& type, size_t count, std::chrono::seconds timeout) const {
    if (!eventually([&] { return named(k, type).size() >= count; }, timeout))
      FAIL("node " << k << ": fewer than " << count << " '" << type << "' events within "
                   << timeout.count() << " s\n"
                   << text(k));
  }
  // The complete checkpoints written for an emergency (every one of `world` ranks).
  std::vector<mn::CommittedCheckpoint> emergencies(uint32_t world = 4) const {
    std::vector<mn::CommittedCheckpoint> out;
    for (const auto& m : mn::checkpoints(run.dirs.ckpt()))
      if (m.reason == "emergency") {
        CHECK(m.world_size == world);
        out.push_back(m);
      }
    return out;
  }
};

// Waits for the job to end; it must end COMPLETED (the output and both nodes' events otherwise).
inline SlurmJob wait_multinode_done(const SlurmCluster& c, uint32_t id, const MultiNodeRun& r,
                                    std::chrono::seconds timeout) {
  auto j = c.wait_job_state(
      id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL"}, timeout);
  INFO("job output:\n" << slurp(c.job_output_path(id)) << "\n" << r.texts());
  if (!j.ok()) FAIL(j.error().message() << "\n" << c.ctld_log_tail(3000));
  CHECK(j->state() == "COMPLETED");
  return *j;
}

// Each node's Slurm decisions, notices, launches and commits, for the test's output (ctest -V).
inline void print_timeline(const std::string& title, const MultiNodeRun& r) {
  std::cout << "--- " << title << "\n";
  for (int k = 0; k < 2; ++k)
    for (const auto& e : r.events(k)) {
      if (e.type.rfind("slurm_", 0) != 0 && e.type != "notice" &&
          e.type != "checkpoint_committed" && e.type != "launch" && e.type != "finish" &&
          e.type != "node_unhealthy" && e.type != "node_lost")
        continue;
      std::cout << "node" << k << " " << e.time_unix_ms << " " << e.type;
      for (const auto& [key, v] : e.fields) std::cout << " " << key << "=" << v;
      std::cout << "\n";
    }
  std::cout << std::flush;
}

}  // namespace shardguard::testing
