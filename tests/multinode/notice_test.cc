// A notice on one node of a multi-node job (SIGTERM to that node's `shardguard run`, as
// Kubernetes or Slurm send it, or `shardguard drain` on its run dir) reaches the coordinator,
// which picks one at_step for every rank: one global emergency checkpoint commits. With a
// fixed node count the whole job then exits 75 on every node and the next run resumes
// bit-identical; with MIN:MAX the notified node leaves and the job goes on without it, its
// resharded resume checked exactly against the emergency checkpoint. The all-reducing trainer
// is used throughout, so the ranks are coupled as in data-parallel training.
#include <signal.h>

#include <catch2/catch.hpp>

#include "tests/multinode/checks.h"
#include "tests/multinode/cluster.h"
#include "tests/support/command.h"

using namespace shardguard::testing;
using namespace shardguard::testing::multinode;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> train_args(int steps) {
  return {"--steps", std::to_string(steps), "--rows", "64",         "--log-every",
          "0",       "--sleep-ms",          "5",      "--allreduce"};
}

enum class How { kSigterm, kDrain };

void notify(Cluster& c, int k, How how) {
  if (how == How::kSigterm) {
    ::kill(c.pid(k), SIGTERM);
  } else {
    const auto r = run_command(shardguard_bin() + " drain --run-dir " + c.run_dir(k) +
                               " --deadline 20s --reason 'test drain'");
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
  }
}

// After a notice on `node`: exactly one emergency checkpoint_now, for every rank at one
// at_step, and its checkpoint committed by epoch `attempt` with every rank of that epoch (one
// manifest at at_step), the newest of the directory. Returns at_step.
uint64_t check_one_emergency(const Cluster& c, int node, uint64_t attempt, uint32_t world) {
  const auto events = c.events();
  const auto notices = of_type(events, "notice");
  REQUIRE(notices.size() == 1);
  CHECK(field(notices[0], "node") == std::to_string(node));
  std::vector<EventRecord> emergencies;
  for (const auto& e : of_type(events, "checkpoint_now"))
    if (field(e, "kind") == "emergency") emergencies.push_back(e);
  REQUIRE(emergencies.size() == 1);
  CHECK(field(emergencies[0], "attempt") == std::to_string(attempt));
  const uint64_t at_step = std::stoull(field(emergencies[0], "at_step"));
  const auto all = checkpoints(c.ckpt());
  REQUIRE(!all.empty());
  int emergency_manifests = 0;
  for (const auto& m : all) emergency_manifests += m.reason == "emergency";
  CHECK(emergency_manifests == 1);
  const auto it = std::find_if(all.begin(), all.end(), [&](const CommittedCheckpoint& m) {
    return m.reason == "emergency";
  });
  REQUIRE(it != all.end());
  CHECK(it->step == at_step);
  CHECK(it->attempt == attempt);
  CHECK(it->world_size == world);
  // The emergency checkpoint is where the epoch stopped: nothing after it in that epoch.
  for (const auto& m : all)
    if (m.attempt == attempt) CHECK(m.step <= at_step);
  // Every rank of the epoch exited on its own after the save (75), none killed.
  int exits = 0;
  for (const auto& e : of_type(events, "rank_exit")) {
    if (field(e, "attempt") != std::to_string(attempt)) continue;
    ++exits;
    INFO("rank " << field(e, "rank") << ": " << field(e, "status"));
    CHECK(field(e, "status") == "exited with code 75");
  }
  CHECK(exits == static_cast<int>(world));
  return at_step;
}

}  // namespace

TEST_CASE(
    "A notice on one node of a fixed-size job: one global emergency checkpoint, every node "
    "exits 75, the next run resumes bit-identical",
    "[multinode][integration]") {
  const How how = GENERATE(How::kSigterm, How::kDrain);
  ClusterOptions o;
  o.nodes = 3;
  o.nnodes = "3";
  o.trainer_args = train_args(900);
  Cluster c(o);
  c.start_all();
  REQUIRE(wait_event_type(c, "checkpoint_committed", 60s));
  notify(c, 1, how);
  REQUIRE(c.wait_all(75, 60s));
  const uint64_t at_step = check_one_emergency(c, 1, 0, 3);
  const auto finish = of_type(c.events(), "finish");
  REQUIRE(finish.size() == 1);
  CHECK(field(finish[0], "exit_code") == "75");
  // Each follower node records the end it was told.
  for (int k = 1; k < 3; ++k) {
    const auto node_finish = of_type(c.node_events(k), "finish");
    REQUIRE(node_finish.size() == 1);
    CHECK(field(node_finish[0], "exit_code") == "75");
  }

  // The scheduler requeues: every node starts again and the job resumes from the emergency
  // checkpoint, at the same world size.
  c.start_all();
  REQUIRE(c.wait_all(0, 120s));
  const auto launches = of_type(c.events(), "launch");
  REQUIRE(launches.size() == 2);
  CHECK(field(launches[1], "resume_step") == std::to_string(at_step));
  check_history(c.events(), c.ckpt());
  const auto dumps = verify_resume_dumps(c.dump_dir());
  CHECK(dumps.size() == 3);
  for (const auto& d : dumps) CHECK(d.step == at_step);
  CHECK(final_hash(c.ckpt()) == allreduce_reference(o.trainer_args, 3));
}

TEST_CASE(
    "SIGTERM to one node of a MIN:MAX job: one global emergency checkpoint, that node leaves "
    "(exit 75), the others go on resharded from it to the end",
    "[multinode][integration]") {
  ClusterOptions o;
  o.nodes = 3;
  o.nnodes = "2:3";
  o.trainer_args = train_args(900);
  Cluster c(o);
  c.start_all();
  REQUIRE(wait_event_type(c, "checkpoint_committed", 60s));
  notify(c, 2, How::kSigterm);
  // The notified node is never placed again, and its `shardguard run` exits 75 as soon as the
  // job has shrunk (released by the coordinator), while the others go on.
  REQUIRE(wait_event_type(c, "shrink", 60s));
  CHECK(c.wait(2, 10s) == 75);
  const int64_t node2_gone = wall_ms_now();
  CHECK(c.wait(0, 120s) == 0);
  CHECK(c.wait(1, 10s) == 0);
  const uint64_t at_step = check_one_emergency(c, 2, 0, 3);
  const auto events = c.events();
  const auto released = of_type(events, "node_released");
  REQUIRE(released.size() == 1);
  CHECK(field(released[0], "node") == "2");
  const auto finished = of_type(events, "finish");
  REQUIRE(finished.size() == 1);
  CHECK(node2_gone < finished[0].time_unix_ms);
  const auto shrink = of_type(events, "shrink");
  REQUIRE(shrink.size() == 1);
  CHECK(field(shrink[0], "nodes") == "2");
  const auto launches = of_type(events, "launch");
  REQUIRE(launches.size() == 2);
  CHECK(field(launches[1], "nodes") == "0,1");
  CHECK(field(launches[1], "resume_step") == std::to_string(at_step));
  check_history(events, c.ckpt());
  const auto dumps = verify_resume_dumps(c.dump_dir());
  REQUIRE(dumps.size() == 2);
  for (const auto& d : dumps) {
    CHECK(d.step == at_step);
    CHECK(d.world_size == 2);
    CHECK(d.saved_world_size == 3);
  }
  const auto last = checkpoints(c.ckpt()).back();
  CHECK(last.step == 900);
  CHECK(last.world_size == 2);
}

// Regression: only preemptions let the notified node leave, so draining one node of an
// elastic job stopped the whole job with 75. Any stop notice of some nodes makes them leave.
TEST_CASE("`shardguard drain` of one node of a MIN:MAX job: that node leaves, the others go on",
          "[multinode][integration]") {
  ClusterOptions o;
  o.nodes = 3;
  o.nnodes = "2:3";
  o.trainer_args = train_args(900);
  Cluster c(o);
  c.start_all();
  REQUIRE(wait_event_type(c, "checkpoint_committed", 60s));
  notify(c, 2, How::kDrain);
  REQUIRE(wait_event_type(c, "shrink", 60s));
  CHECK(c.wait(2, 10s) == 75);  // released at once
  REQUIRE(c.wait(0, 120s) == 0);
  CHECK(c.wait(1, 10s) == 0);
  CHECK(of_type(c.events(), "shrink").size() == 1);
}
