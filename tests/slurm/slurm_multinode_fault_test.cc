// The shipped examples/slurm/train.sbatch as a 2-node job (`sbatch -N2`) of the real Slurm, in
// the scenarios that take a minute or more (label `slow`; each is one bounded scenario, the
// same with SHARDGUARD_SLOW_BOUNDED=1), each ending bit-identical to the same 4-rank training
// uninterrupted:
//   --signal=B:USR1@50 --time=1    slurmctld's 30 s check sends USR1 to the batch shell, whose
//                                  trap gives it to srun and so to both nodes -> one emergency
//                                  checkpoint -> requeued once by the coordinator's node
//   a time limit without --signal  slurmctld's 30 s check finds the 1-minute limit passed:
//                                  SIGTERM to every process of both nodes -> one emergency
//                                  checkpoint within KillWait -> exit 75 -> the coordinator's
//                                  node requeues the TIMEOUT job, once -> resumed
//   node failure                   3 slurmd nodes; kill -9 of node rank 1's slurmd, slurmstepd
//                                  and job processes ("the machine died"): Slurm marks it DOWN,
//                                  ends the allocation and, with --requeue, reruns the job on the
//                                  other two nodes; the coordinator lost node 1 at once, and
//                                  when Slurm's SIGTERM came it exited 75 with nothing to save
//                                  and did not requeue a second time; resumed from the last
//                                  complete checkpoint
#include <set>

#include "tests/slurm/slurm_multinode_util.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

TEST_CASE(
    "slurm + shardguard, 2 nodes: --signal=B:USR1@50 before the time limit -> one emergency "
    "checkpoint of both nodes, requeued once by the coordinator's node, resumed bit-identical",
    "[integration][slow]") {
  SG_SLURM_OR_SKIP();
  SlurmOptions o;
  o.nodes = 2;
  auto c = start_cluster(o);
  // The signal comes 5-22 s after the start here (50 s before a 1-minute limit, by a 30 s
  // check): the training outlasts that.
  const auto args = allreduce_train(1500, 40);
  MultiNodeRun r(args);
  const auto id =
      submit_or_fail(*c, shipped_script(), r.sbatch_args({"--time=1", "--signal=B:USR1@50"}));
  wait_state_or_fail(*c, id, {"RUNNING"}, 30s);
  r.wait(0, "slurm_decision", 1, 90s);
  // The rerun gets the same limit and would be signalled again: give it time to finish.
  wait_state_or_fail(*c, id, {"PENDING"}, 30s);
  REQUIRE(
      c->run({"scontrol", "update", "JobId=" + std::to_string(id), "TimeLimit=10"})->exit_code ==
      0);
  const auto job = wait_multinode_done(*c, id, r, 180s);
  print_timeline("sbatch -N2 --time=1 --signal=B:USR1@50", r);
  INFO(r.texts());
  // The batch shell's USR1 reached the shardguard of each node through srun.
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
  for (int k = 0; k < 2; ++k) CHECK(mn::field(r.named(k, "finish").at(0), "exit_code") == "75");
  CHECK(job.restarts() == 1);
  const auto emergencies = r.emergencies(4);
  REQUIRE(emergencies.size() == 1);
  CHECK(mn::field(r.named(0, "launch").back(), "resume_step") ==
        std::to_string(emergencies[0].step));
  CHECK(mn::final_hash(r.run.dirs.ckpt()) == allreduce_reference(args, 4));
}

TEST_CASE(
    "slurm + shardguard, 2 nodes: a time limit without --signal -> one emergency checkpoint "
    "within KillWait, exit 75 on both nodes, requeued once by the coordinator's node, resumed "
    "bit-identical",
    "[integration][slow]") {
  SG_SLURM_OR_SKIP();
  SlurmOptions o;
  o.nodes = 2;
  auto c = start_cluster(o);
  // About 100 s of training (more with two nodes' all-reduce): the limit (60-90 s) comes first.
  const auto args = allreduce_train(2000, 50);
  MultiNodeRun r(args);
  const std::string script = without_lines(shipped_script(), "#SBATCH --signal");
  REQUIRE(script.find("#SBATCH --signal") == std::string::npos);
  const auto id = submit_or_fail(*c, script, r.sbatch_args({"--time=1"}));
  wait_state_or_fail(*c, id, {"RUNNING"}, 30s);
  r.wait(0, "slurm_decision", 1, 150s);
  // The rerun gets the same limit: give it time to finish.
  wait_state_or_fail(*c, id, {"PENDING"}, 30s);
  REQUIRE(
      c->run({"scontrol", "update", "JobId=" + std::to_string(id), "TimeLimit=10"})->exit_code ==
      0);
  const auto job = wait_multinode_done(*c, id, r, 240s);
  print_timeline("sbatch -N2, time limit without --signal", r);
  INFO(r.texts());
  const auto notices = r.named(0, "notice");
  REQUIRE(!notices.empty());
  CHECK(mn::field(notices[0], "kind") == "sigterm");
  const auto states = r.named(0, "slurm_state");
  REQUIRE(!states.empty());
  for (const auto& st : states) CHECK(mn::field(st, "error").empty());
  CHECK(mn::field(states[0], "reason") == "TimeLimit");
  const auto decision = r.named(0, "slurm_decision").at(0);
  CHECK(mn::field(decision, "case") == "time-limit");
  CHECK(mn::field(decision, "requeue") == "true");
  REQUIRE(r.named(0, "slurm_requeue").size() == 1);
  CHECK(mn::field(r.named(0, "slurm_requeue").at(0), "ok") == "true");
  CHECK(r.named(1, "slurm_requeue").empty());
  CHECK(mn::field(r.named(1, "slurm_decision").at(0), "case") == "other-node");
  for (int k = 0; k < 2; ++k) CHECK(mn::field(r.named(k, "finish").at(0), "exit_code") == "75");
  CHECK(job.restarts() == 1);
  // One emergency checkpoint of all 4 ranks, committed within KillWait of the SIGTERM.
  const auto emergencies = r.emergencies(4);
  REQUIRE(emergencies.size() == 1);
  int64_t commit_ms = -1;
  for (const auto& e : r.named(0, "checkpoint_committed"))
    if (e.time_unix_ms >= notices[0].time_unix_ms) {
      commit_ms = e.time_unix_ms - notices[0].time_unix_ms;
      break;
    }
  std::cout << "SIGTERM -> emergency checkpoint of both nodes committed in " << commit_ms
            << " ms\n";
  CHECK(commit_ms >= 0);
  CHECK(commit_ms < c->options().kill_wait_s * 1000);
  const auto launches = r.named(0, "launch");
  REQUIRE(launches.size() >= 2);
  CHECK(mn::field(launches.back(), "resume_step") == std::to_string(emergencies[0].step));
  for (int k = 0; k < 2; ++k)
    CHECK(mn::field(r.named(k, "slurm_job").back(), "restart_count") == "1");
  CHECK(mn::final_hash(r.run.dirs.ckpt()) == allreduce_reference(args, 4));
}

TEST_CASE(
    "slurm + shardguard, 2 of 3 nodes: kill -9 of node rank 1's slurmd and job -> Slurm requeues "
    "the job (never shardguard as well), reruns it on the other two nodes, resumed from the last "
    "complete checkpoint, bit-identical",
    "[integration][slow]") {
  SG_SLURM_OR_SKIP();
  SlurmOptions o;
  o.nodes = 3;
  auto c = start_cluster(o);
  const auto args = allreduce_train(1500, 20);
  MultiNodeRun r(args);
  const auto id = submit_or_fail(*c, shipped_script(), r.sbatch_args());
  const auto running = wait_state_or_fail(*c, id, {"RUNNING"}, 30s);
  REQUIRE(running.node_list() == "n[1-2]");
  r.wait(0, "checkpoint_committed", 2, 60s);
  const auto killed_at = mn::wall_ms_now();
  REQUIRE(c->kill_node("n2").ok());
  // DOWN after about SlurmdTimeout + 2 x MessageTimeout; then Slurm requeues (--requeue).
  wait_state_or_fail(*c, id, {"PENDING"}, 60s);
  const auto requeued_at = mn::wall_ms_now();
  const auto job = wait_multinode_done(*c, id, r, 180s);
  print_timeline("sbatch -N2 on 3 nodes, kill -9 of n2", r);
  INFO(r.texts());
  std::cout << "kill -9 of n2 -> the job pending again (Slurm's requeue) after "
            << requeued_at - killed_at << " ms\n";
  CHECK(job.restarts() == 1);
  CHECK(job.node_list() == "n[1,3]");
  CHECK(c->node_state("n2").value_or("?") == "DOWN");
  // Nobody warned the nodes before the machine vanished: the coordinator lost node 1 at once
  // (its connection closed) and waited for it; when Slurm ended the allocation (SIGTERM to
  // node 0, Restarts already + 1) it exited 75 with nothing to save and left the requeue to
  // Slurm: never a second one.
  const auto lost = r.named(0, "node_lost");
  REQUIRE(!lost.empty());
  CHECK(mn::field(lost[0], "node") == "1");
  CHECK(mn::field(r.named(0, "slurm_decision").at(0), "case") == "requeued-by-slurm");
  for (int k = 0; k < 2; ++k) CHECK(r.named(k, "slurm_requeue").empty());
  for (const auto& d : r.named(0, "slurm_decision")) CHECK(mn::field(d, "requeue") == "false");
  // The rerun: node rank 1 on n3, both as Slurm's restart 1, resumed from a checkpoint of 4.
  CHECK(mn::field(r.named(1, "slurm_job").back(), "node") == "n3");
  for (int k = 0; k < 2; ++k) {
    CHECK(mn::field(r.named(k, "slurm_job").back(), "restart_count") == "1");
    CHECK(mn::field(r.named(k, "finish").back(), "exit_code") == "0");
  }
  const auto launches = r.named(0, "launch");
  REQUIRE(launches.size() >= 2);
  CHECK(mn::field(launches.back(), "resume_step") != "-1");
  CHECK(mn::field(launches.back(), "nproc") == "4");
  CHECK(mn::final_hash(r.run.dirs.ckpt()) == allreduce_reference(args, 4));
}
