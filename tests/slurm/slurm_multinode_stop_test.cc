// The shipped examples/slurm/train.sbatch as a 2-node job (`sbatch -N2`) of the real Slurm,
// stopped in the ways slurm_multinode_test does not cover, each ending bit-identical to the
// same 4-rank training uninterrupted:
//   scontrol requeue (a person)    SIGTERM to both nodes -> one emergency checkpoint -> exit 75
//                                  on both nodes -> Slurm requeued it: nobody requeues it
//                                  again (Restarts stays 1) -> resumed on both nodes
//   preemption, PreemptMode=CANCEL the same SIGTERM; Slurm would cancel it: the coordinator's
//                                  node requeues it, once -> resumed
//   a failed health check on one   3 slurmd nodes; node rank 1's GPU check (a fake NVML, one
//   node (the GPU count drops)     script per node) finds one GPU of two gone -> one emergency
//                                  checkpoint -> exit 75 -> the coordinator's node requeues
//                                  with that node in ExcNodeList -> reruns on the other two
// And --gres=gpu:3 --cpus-per-task=3 (Slurm counting 3 GPUs per node that are empty files):
// 3 ranks per node, each with the node's CUDA_VISIBLE_DEVICES and its own LOCAL_RANK.
#include <filesystem>
#include <map>
#include <set>

#include "tests/slurm/slurm_multinode_util.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

// The variables of a rank's environment, from `env` output.
std::map<std::string, std::string> parse_env(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (auto eq = line.find('='); eq != std::string::npos)
      out[line.substr(0, eq)] = line.substr(eq + 1);
  return out;
}

// Both nodes' shardguard exited 75 after the stop, and one emergency checkpoint of all 4 ranks
// committed; returns its step.
uint64_t check_one_emergency(const MultiNodeRun& r) {
  for (int k = 0; k < 2; ++k) CHECK(mn::field(r.named(k, "finish").at(0), "exit_code") == "75");
  const auto e = r.emergencies(4);
  CHECK(e.size() == 1);
  return e.empty() ? 0 : e[0].step;
}

// The rerun resumed from `step` with 4 ranks and both nodes ran as Slurm's restart 1.
void check_resumed(const MultiNodeRun& r, uint64_t step) {
  const auto launches = r.named(0, "launch");
  REQUIRE(launches.size() >= 2);
  CHECK(mn::field(launches.back(), "resume_step") == std::to_string(step));
  CHECK(mn::field(launches.back(), "nproc") == "4");
  for (int k = 0; k < 2; ++k) {
    const auto slurm_jobs = r.named(k, "slurm_job");
    REQUIRE(slurm_jobs.size() == 2);
    CHECK(mn::field(slurm_jobs[1], "restart_count") == "1");
    CHECK(mn::field(r.named(k, "finish").back(), "exit_code") == "0");
  }
}

}  // namespace

TEST_CASE(
    "slurm + shardguard, 2 nodes: scontrol requeue by a person -> one emergency checkpoint, exit "
    "75 on both nodes, requeued by Slurm alone (never twice), resumed bit-identical",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  SlurmOptions o;
  o.nodes = 2;
  auto c = start_cluster(o);
  const auto args = allreduce_train(500, 10);
  MultiNodeRun r(args);
  const auto id = submit_or_fail(*c, shipped_script(), r.sbatch_args());
  wait_state_or_fail(*c, id, {"RUNNING"}, 30s);
  r.wait(0, "checkpoint_committed", 1, 60s);
  REQUIRE(c->run({"scontrol", "requeue", std::to_string(id)})->exit_code == 0);
  r.wait(0, "slurm_decision", 1, 60s);
  const auto job = wait_multinode_done(*c, id, r, 120s);
  print_timeline("sbatch -N2, scontrol requeue", r);
  INFO(r.texts());
  CHECK(mn::field(r.named(0, "notice").at(0), "kind") == "sigterm");
  // Node 0 read Restarts + 1 and left it to Slurm; node 1 read and requeued nothing.
  const auto decision = r.named(0, "slurm_decision").at(0);
  CHECK(mn::field(decision, "case") == "requeued-by-slurm");
  CHECK(mn::field(decision, "requeue") == "false");
  for (int k = 0; k < 2; ++k) CHECK(r.named(k, "slurm_requeue").empty());
  CHECK(r.named(1, "slurm_state").empty());
  CHECK(mn::field(r.named(1, "slurm_decision").at(0), "case") == "other-node");
  CHECK(job.restarts() == 1);
  check_resumed(r, check_one_emergency(r));
  CHECK(mn::final_hash(r.run.dirs.ckpt()) == allreduce_reference(args, 4));
}

TEST_CASE(
    "slurm + shardguard, 2 nodes: preemption in CANCEL mode -> one emergency checkpoint, exit 75, "
    "requeued once by the coordinator's node instead of cancelled, resumed bit-identical",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  SlurmOptions o;
  o.nodes = 2;
  o.preempt_mode = "CANCEL";
  auto c = start_cluster(o);
  const auto args = allreduce_train(600, 10);
  MultiNodeRun r(args);
  const auto victim = submit_or_fail(*c, shipped_script(),
                                     r.sbatch_args({"-p", kSlurmLowPartition, "--exclusive"}));
  wait_state_or_fail(*c, victim, {"RUNNING"}, 30s);
  r.wait(0, "checkpoint_committed", 1, 60s);
  const auto high = submit_or_fail(*c, "#!/bin/bash\nsleep 2\n",
                                   {"-p", kSlurmHighPartition, "-N2", "--exclusive"});
  r.wait(0, "slurm_decision", 1, 60s);
  wait_state_or_fail(*c, high, {"COMPLETED"}, 90s);
  const auto job = wait_multinode_done(*c, victim, r, 150s);
  print_timeline("sbatch -N2, preempted (CANCEL mode)", r);
  INFO(r.texts());
  CHECK(mn::field(r.named(0, "notice").at(0), "kind") == "sigterm");
  CHECK(mn::field(r.named(0, "slurm_state").at(0), "preempting") == "true");
  const auto decision = r.named(0, "slurm_decision").at(0);
  CHECK(mn::field(decision, "case") == "preempted");
  CHECK(mn::field(decision, "requeue") == "true");
  REQUIRE(r.named(0, "slurm_requeue").size() == 1);
  CHECK(mn::field(r.named(0, "slurm_requeue").at(0), "ok") == "true");
  CHECK(r.named(1, "slurm_requeue").empty());
  CHECK(mn::field(r.named(1, "slurm_decision").at(0), "case") == "other-node");
  CHECK(job.restarts() == 1);
  check_resumed(r, check_one_emergency(r));
  CHECK(mn::final_hash(r.run.dirs.ckpt()) == allreduce_reference(args, 4));
}

TEST_CASE(
    "slurm + shardguard, 2 of 3 nodes: node rank 1 fails a health check -> one emergency "
    "checkpoint, requeued with that node in ExcNodeList, reruns on the other two, bit-identical",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  SlurmOptions o;
  o.nodes = 3;
  auto c = start_cluster(o);
  // Each node's GPU check loads the fake NVML, which reads the script of its node
  // (SLURMD_NODENAME for %n): two GPUs everywhere, until one of n2's falls off the bus.
  TempDir gpus;
  for (const char* n : {"n1", "n2", "n3"}) spit(gpus / (std::string("nvml-") + n), "count 2\n");
  const auto args = allreduce_train(600, 10);
  MultiNodeRun r(args, std::string("[health]\ngpu = true\nnvml_library = \"") + SG_FAKE_NVML_LIB +
                           "\"\nexpected_gpus = 2\ncheck_interval = \"200ms\"\nxid = false\n"
                           "disk = false\nmemory = false\n");
  r.run.exports.push_back("SG_FAKE_NVML_SCRIPT=" + (gpus / "nvml-%n"));
  const auto id = submit_or_fail(*c, shipped_script(), r.sbatch_args());
  const auto running = wait_state_or_fail(*c, id, {"RUNNING"}, 30s);
  REQUIRE(running.node_list() == "n[1-2]");
  r.wait(0, "checkpoint_committed", 1, 60s);
  spit(gpus / "nvml-n2", "count 1\n");
  r.wait(0, "slurm_decision", 1, 60s);
  const auto job = wait_multinode_done(*c, id, r, 150s);
  print_timeline("sbatch -N2 on 3 nodes, node rank 1 unhealthy", r);
  INFO(r.texts());
  // Node rank 1 (n2) found it; the coordinator's node mapped node 1 to n2 and excluded it.
  const auto unhealthy = r.named(0, "node_unhealthy");
  REQUIRE(!unhealthy.empty());
  CHECK(mn::field(unhealthy[0], "node") == "1");
  CHECK_THAT(mn::field(unhealthy[0], "evidence"), Catch::Contains("1 of 2 expected GPUs"));
  const auto decision = r.named(0, "slurm_decision").at(0);
  CHECK(mn::field(decision, "case") == "node-unhealthy");
  CHECK(mn::field(decision, "exclude_node") == "n2");
  CHECK(mn::field(r.named(0, "slurm_requeue").at(0), "ok") == "true");
  CHECK(mn::field(r.named(0, "slurm_exclude").at(0), "ok") == "true");
  CHECK(r.named(1, "slurm_requeue").empty());
  CHECK(job.get("ExcNodeList") == "n2");
  CHECK(job.node_list() == "n[1,3]");
  CHECK(job.restarts() == 1);
  const auto emergency = check_one_emergency(r);
  // The rerun's node rank 1 is n3, logging in the same node1 directory.
  CHECK(mn::field(r.named(1, "slurm_job").back(), "node") == "n3");
  check_resumed(r, emergency);
  CHECK(mn::final_hash(r.run.dirs.ckpt()) == allreduce_reference(args, 4));
}

TEST_CASE(
    "slurm + shardguard, 2 nodes: sbatch -N2 --gres=gpu:3 --cpus-per-task=3 of the shipped "
    "script -> 3 ranks per node, each with the node's 3 GPUs and its own LOCAL_RANK",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  SlurmOptions o;
  o.nodes = 2;
  o.cpus_per_node = 4;
  o.gpus_per_node = 3;
  auto c = start_cluster(o);
  // The ranks' command: record the environment, then train.
  TempDir envs;
  const std::string wrapper = envs / "rank.sh";
  spit(wrapper, "#!/bin/bash\nenv > '" + envs.path() +
                    "/env-'\"${SLURMD_NODENAME}-${LOCAL_RANK}\"\nexec '" + trainer_bin() +
                    "' \"$@\"\n");
  std::filesystem::permissions(wrapper, std::filesystem::perms::owner_all);
  const auto args = allreduce_train(200, 0);
  MultiNodeRun r(args);
  r.run.command[0] = wrapper;
  const auto id =
      submit_or_fail(*c, shipped_script(), r.sbatch_args({"--gres=gpu:3", "--cpus-per-task=3"}));
  const auto job = wait_multinode_done(*c, id, r, 120s);
  print_timeline("sbatch -N2 --gres=gpu:3 --cpus-per-task=3", r);
  const std::string out = slurp(c->job_output_path(id));
  INFO(out << "\n" << r.texts());
  CHECK(job.get("TresPerNode").find("gpu:3") != std::string::npos);
  const auto launches = r.named(0, "launch");
  REQUIRE(launches.size() == 1);
  CHECK(mn::field(launches[0], "nproc") == "6");
  std::set<std::string> ranks;
  for (const char* node : {"n1", "n2"})
    for (int local = 0; local < 3; ++local) {
      const std::string path = envs / ("env-" + std::string(node) + "-" + std::to_string(local));
      auto env = parse_env(slurp(path));
      INFO(path << ":\n" << slurp(path));
      REQUIRE(!env.empty());
      CHECK(env.at("SLURMD_NODENAME") == node);
      CHECK(env.at("LOCAL_WORLD_SIZE") == "3");
      CHECK(env.at("WORLD_SIZE") == "6");
      ranks.insert(env.at("RANK"));
      CHECK(env.count("SLURM_GPUS_ON_NODE") == 1);
      if (env.count("SLURM_GPUS_ON_NODE")) CHECK(env.at("SLURM_GPUS_ON_NODE") == "3");
      CHECK(env.count("CUDA_VISIBLE_DEVICES") == 1);
      if (env.count("CUDA_VISIBLE_DEVICES")) CHECK(env.at("CUDA_VISIBLE_DEVICES") == "0,1,2");
      CHECK(env.at("SLURM_CPUS_PER_TASK") == "3");
      std::cout << node << " local rank " << local << ": RANK=" << env.at("RANK")
                << " CUDA_VISIBLE_DEVICES=" << env["CUDA_VISIBLE_DEVICES"]
                << " SLURM_GPUS_ON_NODE=" << env["SLURM_GPUS_ON_NODE"]
                << " SLURM_STEP_GPUS=" << env["SLURM_STEP_GPUS"]
                << " SLURM_CPUS_PER_TASK=" << env["SLURM_CPUS_PER_TASK"]
                << " SLURM_CPUS_ON_NODE=" << env["SLURM_CPUS_ON_NODE"] << "\n";
    }
  CHECK(ranks == std::set<std::string>{"0", "1", "2", "3", "4", "5"});
  CHECK(mn::final_hash(r.run.dirs.ckpt()) == allreduce_reference(args, 6));
}
