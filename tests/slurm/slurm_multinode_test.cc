// The shipped examples/slurm/train.sbatch as a 2-node job (`sbatch -N2`) on a real Slurm of two
// slurmd nodes on this machine: one `shardguard run` per node (srun --ntasks-per-node=1), node
// rank 0 runs the coordinator at the first host's NodeAddr, the nodes authenticate with the
// secret the script made in the run directory, and the example trainer runs as 2 ranks per
// node that all-reduce every step across both nodes (--allreduce, MASTER_ADDR on node 0):
//   srun -N2 shardguard run --check-config   each node's placement from Slurm's variables alone
//   to completion                  bit-identical to the same 4-rank training uninterrupted
//   preemption (REQUEUE mode)      SIGTERM to both nodes' processes -> one emergency checkpoint
//                                  of all 4 ranks -> exit 75 -> the coordinator's node requeues
//                                  the job, once (the other node does not) -> resumed on both
//                                  nodes -> bit-identical
//   scancel --signal=USR1 --batch  the script's trap passes USR1 to srun, which gives it to
//                                  both nodes -> the same, requeued by the coordinator's node
//   scancel                        emergency checkpoint of all 4 ranks, exit 75 on both
//                                  nodes, never requeued: the job ends CANCELLED
#include <set>

#include "tests/slurm/slurm_multinode_util.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

SlurmCluster& cluster() {
  static std::unique_ptr<SlurmCluster> c = [] {
    SlurmOptions o;
    o.nodes = 2;
    return start_cluster(o);
  }();
  return *c;
}

std::vector<std::string> train(int steps, int sleep_ms) { return allreduce_train(steps, sleep_ms); }
std::string reference(const std::vector<std::string>& args) { return allreduce_reference(args, 4); }

SlurmJob wait_done(const SlurmCluster& c, uint32_t id, const MultiNodeRun& r,
                   std::chrono::seconds timeout) {
  return wait_multinode_done(c, id, r, timeout);
}

}  // namespace

TEST_CASE(
    "slurm + shardguard, 2 nodes: srun -N2 --ntasks-per-node=1 -> each shardguard places itself "
    "from SLURM_* (node rank, node count, the first host as the coordinator)",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  auto& c = cluster();
  REQUIRE(c.cancel_all_jobs().ok());
  TempDir dir;
  const std::string secret = dir / "secret";
  REQUIRE(run_command(shardguard_bin() + " secret generate " + secret).exit_code == 0);
  // No SHARDGUARD_RDZV_HOST: the host comes from `scontrol show hostnames` of the node list.
  auto r = c.run(
      {"srun", "-N2", "--ntasks-per-node=1", "--label", "env", "SHARDGUARD_SECRET_FILE=" + secret,
       shardguard_bin(), "run", "--check-config", "--nproc", "2", "--", "true"},
      60s);
  REQUIRE(r.ok());
  INFO(r->out << r->err);
  REQUIRE(r->exit_code == 0);
  CHECK_THAT(r->out, Catch::Contains("0: Slurm: node 0 of 2, coordinator n1:2"));
  CHECK_THAT(r->out, Catch::Contains("1: Slurm: node 1 of 2, coordinator n1:2"));
  CHECK_THAT(r->out, Catch::Contains("node rank 1 <- SLURM_NODEID"));
  CHECK_THAT(r->out, Catch::Contains("coordinator host n1 <- scontrol show hostnames"));
  CHECK_THAT(r->out, Catch::Contains("20000 + SLURM_JOB_ID mod 10000"));
}

TEST_CASE(
    "slurm + shardguard, 2 nodes: sbatch -N2 of the shipped script runs the all-reducing trainer "
    "across both nodes to completion, bit-identical",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  auto& c = cluster();
  REQUIRE(c.cancel_all_jobs().ok());
  const auto args = train(300, 0);
  MultiNodeRun r(args);
  const auto id = submit_or_fail(c, shipped_script(), r.sbatch_args());
  const auto job = wait_done(c, id, r, 120s);
  print_timeline("sbatch -N2, uninterrupted", r);
  const std::string out = slurp(c.job_output_path(id));
  INFO(out << "\nnode 0:\n" << r.text(0) << "\nnode 1:\n" << r.text(1));
  CHECK(job.node_list() == "n[1-2]");
  CHECK(out.find("(2 node(s): n[1-2])") != std::string::npos);
  CHECK(out.find("coordinator on n1 (127.0.0.1)") != std::string::npos);
  CHECK(out.find("shardguard exited 0") != std::string::npos);
  // One shardguard per node, each in its own run directory; node 0 decides for the job.
  for (int k = 0; k < 2; ++k) {
    const auto slurm_jobs = r.named(k, "slurm_job");
    REQUIRE(slurm_jobs.size() == 1);
    CHECK(mn::field(slurm_jobs[0], "node") == "n" + std::to_string(k + 1));
    CHECK(mn::field(slurm_jobs[0], "decides") == (k == 0 ? "true" : "false"));
    CHECK(mn::field(r.named(k, "finish").at(0), "exit_code") == "0");
  }
  // The coordinator launched 2 x 2 ranks, once, and the ranks never stopped.
  const auto launches = r.named(0, "launch");
  REQUIRE(launches.size() == 1);
  CHECK(mn::field(launches[0], "nproc") == "4");
  CHECK(r.named(0, "notice").empty());
  CHECK(r.named(0, "slurm_requeue").empty());
  CHECK(job.restarts() == 0);
  CHECK(mn::final_hash(r.run.dirs.ckpt()) == reference(args));
}

TEST_CASE(
    "slurm + shardguard, 2 nodes: preemption -> one emergency checkpoint of every rank of both "
    "nodes, exit 75, requeued once by the coordinator's node, resumed bit-identical",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  auto& c = cluster();
  REQUIRE(c.cancel_all_jobs().ok());
  const auto args = train(600, 10);
  MultiNodeRun r(args);
  const auto victim =
      submit_or_fail(c, shipped_script(), r.sbatch_args({"-p", kSlurmLowPartition, "--exclusive"}));
  wait_state_or_fail(c, victim, {"RUNNING"}, 30s);
  r.wait(0, "checkpoint_committed", 1, 60s);
  const auto high = submit_or_fail(c, "#!/bin/bash\nsleep 2\n",
                                   {"-p", kSlurmHighPartition, "-N2", "--exclusive"});
  r.wait(0, "slurm_decision", 1, 60s);
  wait_state_or_fail(c, high, {"COMPLETED"}, 90s);
  const auto job = wait_done(c, victim, r, 150s);
  print_timeline("sbatch -N2, preempted", r);
  INFO("node 0:\n" << r.text(0) << "\nnode 1:\n" << r.text(1));
  // Slurm's SIGTERM reached both nodes; the coordinator (node 0) saw it as one stop.
  CHECK(mn::field(r.named(0, "notice").at(0), "kind") == "sigterm");
  CHECK(mn::field(r.named(0, "slurm_state").at(0), "preempting") == "true");
  const auto decision = r.named(0, "slurm_decision").at(0);
  CHECK(mn::field(decision, "case") == "preempted");
  CHECK(mn::field(decision, "requeue") == "true");
  CHECK(mn::field(r.named(0, "slurm_requeue").at(0), "ok") == "true");
  // Node 1 read nothing and requeued nothing: one requeue per job.
  CHECK(r.named(1, "slurm_state").empty());
  CHECK(r.named(1, "slurm_requeue").empty());
  CHECK(mn::field(r.named(1, "slurm_decision").at(0), "case") == "other-node");
  CHECK(mn::field(r.named(1, "finish").at(0), "exit_code") == "75");
  CHECK(job.restarts() == 1);
  // One emergency checkpoint, of all 4 ranks; the second run resumed from it on both nodes.
  int emergencies = 0;
  uint64_t emergency_step = 0;
  for (const auto& m : mn::checkpoints(r.run.dirs.ckpt()))
    if (m.reason == "emergency") {
      ++emergencies;
      emergency_step = m.step;
      CHECK(m.world_size == 4);
    }
  CHECK(emergencies == 1);
  const auto launches = r.named(0, "launch");
  REQUIRE(launches.size() >= 2);
  CHECK(mn::field(launches.back(), "resume_step") == std::to_string(emergency_step));
  CHECK(mn::field(launches.back(), "nproc") == "4");
  for (int k = 0; k < 2; ++k) {
    const auto slurm_jobs = r.named(k, "slurm_job");
    REQUIRE(slurm_jobs.size() == 2);
    CHECK(mn::field(slurm_jobs[1], "restart_count") == "1");
    CHECK(mn::field(r.named(k, "finish").back(), "exit_code") == "0");
  }
  CHECK(mn::final_hash(r.run.dirs.ckpt()) == reference(args));
}

TEST_CASE(
    "slurm + shardguard, 2 nodes: scancel --signal=USR1 --batch (the script passes it to both "
    "nodes) -> one emergency checkpoint, requeued once by the coordinator's node, bit-identical",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  auto& c = cluster();
  REQUIRE(c.cancel_all_jobs().ok());
  const auto args = train(500, 10);
  MultiNodeRun r(args);
  const auto id = submit_or_fail(c, shipped_script(), r.sbatch_args());
  wait_state_or_fail(c, id, {"RUNNING"}, 30s);
  r.wait(0, "checkpoint_committed", 1, 60s);
  REQUIRE(c.run({"scancel", "--signal=USR1", "--batch", std::to_string(id)})->exit_code == 0);
  r.wait(0, "slurm_decision", 1, 60s);
  const auto job = wait_done(c, id, r, 120s);
  print_timeline("sbatch -N2, scancel --signal=USR1 --batch", r);
  INFO("node 0:\n" << r.text(0) << "\nnode 1:\n" << r.text(1));
  // srun gave the batch shell's USR1 to the shardguard of each node.
  std::set<std::string> notified;
  for (const auto& n : r.named(0, "notice")) {
    CHECK(mn::field(n, "kind") == "sigusr1");
    notified.insert(mn::field(n, "node"));
  }
  CHECK(notified == std::set<std::string>{"0", "1"});
  const auto decision = r.named(0, "slurm_decision").at(0);
  CHECK(mn::field(decision, "case") == "signal-lead");
  CHECK(mn::field(decision, "requeue") == "true");
  CHECK(r.named(0, "slurm_requeue").size() == 1);
  CHECK(r.named(1, "slurm_requeue").empty());
  CHECK(mn::field(r.named(1, "slurm_decision").at(0), "case") == "other-node");
  CHECK(job.restarts() == 1);
  const std::string out = slurp(c.job_output_path(id));
  INFO("job output:\n" << out);
  CHECK(out.find("shardguard exited 75") != std::string::npos);
  CHECK(out.find("shardguard exited 0") != std::string::npos);
  CHECK(mn::field(r.named(0, "launch").back(), "resume_step") != "-1");
  CHECK(mn::final_hash(r.run.dirs.ckpt()) == reference(args));
}

TEST_CASE(
    "slurm + shardguard, 2 nodes: scancel -> one emergency checkpoint of both nodes, exit 75, "
    "never requeued (CANCELLED)",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  auto& c = cluster();
  REQUIRE(c.cancel_all_jobs().ok());
  MultiNodeRun r(train(100000, 10));
  const auto id = submit_or_fail(c, shipped_script(), r.sbatch_args());
  wait_state_or_fail(c, id, {"RUNNING"}, 30s);
  r.wait(0, "checkpoint_committed", 1, 60s);
  REQUIRE(c.run({"scancel", std::to_string(id)})->exit_code == 0);
  const auto job = wait_state_or_fail(c, id, {"CANCELLED"}, 60s);
  r.wait(0, "slurm_decision", 1, 30s);
  r.wait(1, "slurm_decision", 1, 30s);
  print_timeline("sbatch -N2, scancel", r);
  INFO("node 0:\n" << r.text(0) << "\nnode 1:\n" << r.text(1));
  CHECK(mn::field(r.named(0, "slurm_decision").at(0), "case") == "cancelled");
  CHECK(r.named(0, "slurm_requeue").empty());
  CHECK(r.named(1, "slurm_requeue").empty());
  for (int k = 0; k < 2; ++k) CHECK(mn::field(r.named(k, "finish").at(0), "exit_code") == "75");
  int emergencies = 0;
  for (const auto& m : mn::checkpoints(r.run.dirs.ckpt()))
    if (m.reason == "emergency") {
      ++emergencies;
      CHECK(m.world_size == 4);
    }
  CHECK(emergencies == 1);
  CHECK(job.restarts() == 0);
}
