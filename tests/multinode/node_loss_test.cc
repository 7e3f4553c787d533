// Multi-node jobs on loopback, 3-4 `shardguard run` processes as nodes: an uninterrupted run
// ends bit-identical to one rank alone; a whole node SIGKILLed (supervisor and ranks at once)
// with MIN:MAX shrinks the job to the survivors (resharded resume), the node started again
// grows it back at the next checkpoint, and the end is still bit-identical (the row-parallel
// trainer's weights do not depend on the world size).
#include <catch2/catch.hpp>

#include "tests/multinode/checks.h"
#include "tests/multinode/cluster.h"
#include "tests/support/command.h"

using namespace shardguard::testing::multinode;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> train_args(int steps) {
  return {"--steps", std::to_string(steps), "--rows", "64", "--log-every", "0", "--sleep-ms", "5"};
}

}  // namespace

TEST_CASE("Nodes on loopback train one job to the end, bit-identical to one rank alone",
          "[multinode][integration]") {
  const auto [nodes, nproc] = GENERATE(std::pair{3, 1u}, std::pair{4, 2u});
  ClusterOptions o;
  o.nodes = nodes;
  o.nnodes = std::to_string(nodes);
  o.nproc_per_node = nproc;
  o.trainer_args = train_args(300);
  Cluster c(o);
  c.start_all();
  REQUIRE(c.wait_all(0, 120s));
  const auto events = c.events();
  const auto launches = of_type(events, "launch");
  REQUIRE(launches.size() == 1);
  CHECK(field(launches[0], "nproc") == std::to_string(nodes * nproc));
  std::string all_nodes;
  for (int k = 0; k < nodes; ++k) all_nodes += (k ? "," : "") + std::to_string(k);
  CHECK(field(launches[0], "nodes") == all_nodes);
  CHECK(field(launches[0], "master_port") == std::to_string(c.master_port()));
  CHECK(of_type(events, "node_lost").empty());
  const auto last = checkpoints(c.ckpt()).back();
  CHECK(last.step == 300);
  CHECK(last.world_size == static_cast<uint32_t>(nodes) * nproc);
  check_history(events, c.ckpt());
  CHECK(final_hash(c.ckpt()) == row_parallel_reference(o.trainer_args));
}

TEST_CASE(
    "A whole node SIGKILLed: the survivors relaunch resharded at once, the node comes back, "
    "the job grows at the next checkpoint and ends bit-identical",
    "[multinode][integration]") {
  ClusterOptions o;
  o.nodes = 3;
  o.nnodes = "2:3";
  o.trainer_args = train_args(1200);
  Cluster c(o);
  c.start_all();
  // Wait until the 3-node epoch has committed a checkpoint, then lose node 2 whole.
  REQUIRE(wait_event_type(c, "checkpoint_committed", 60s));
  const auto killed = c.kill_node(2);
  const int64_t killed_at = wall_ms_now();
  CHECK(killed.size() >= 2);  // the supervisor and its rank

  // Lost at once (the kernel closed its connection), survivors relaunched on two nodes.
  const auto lost = wait_event_type(c, "node_lost", 20s);
  REQUIRE(lost);
  CHECK(field(*lost, "node") == "2");
  CHECK_THAT(field(*lost, "why"), Catch::Contains("connection closed"));
  CHECK(lost->time_unix_ms - killed_at < 1500);
  const auto shrunk = wait_event_type(c, "launch", 30s, 1);
  REQUIRE(shrunk);
  CHECK(field(*shrunk, "nodes") == "0,1");
  CHECK(field(*shrunk, "nproc") == "2");
  CHECK(field(*shrunk, "resume_step") != "-1");
  CHECK(field(*shrunk, "master_port") == std::to_string(c.master_port() + 1));
  // `status` shows each node's state: node 2 lost and why, the others placed in attempt 1.
  const auto status = shardguard::testing::run_command(shardguard::testing::shardguard_bin() +
                                                      " status --run-dir " + c.run_dir(0));
  INFO(status.out << status.err);
  CHECK_THAT(status.out, Catch::Contains("node 2 (") && Catch::Contains("): lost (last placed in attempt 0)"));
  CHECK_THAT(status.out, Catch::Contains("connection closed"));
  CHECK_THAT(status.out, Catch::Contains("): running as node rank 1 of attempt 1"));

  // The node comes back: it joins, and the job grows back at its next checkpoint.
  c.start(2);
  const auto grown = wait_event_type(c, "launch", 60s, 2);
  REQUIRE(grown);
  CHECK(field(*grown, "nodes") == "0,1,2");
  CHECK(field(*grown, "nproc") == "3");
  const auto teardowns = of_type(c.events(), "teardown");
  REQUIRE(teardowns.size() >= 2);
  CHECK_THAT(field(teardowns[1], "why"), Catch::Contains("growing from 2 to 3 nodes"));

  REQUIRE(c.wait_all(0, 120s));
  const auto events = c.events();
  check_history(events, c.ckpt());
  // Each resume loaded exactly what was saved, across 3 -> 2 and 2 -> 3 ranks.
  const auto dumps = verify_resume_dumps(c.dump_dir());
  bool shrink = false, grow = false;
  for (const auto& d : dumps) {
    shrink = shrink || (d.world_size == 2 && d.saved_world_size == 3);
    grow = grow || (d.world_size == 3 && d.saved_world_size == 2);
  }
  CHECK(shrink);
  CHECK(grow);
  CHECK(final_hash(c.ckpt()) == row_parallel_reference(o.trainer_args));
}
