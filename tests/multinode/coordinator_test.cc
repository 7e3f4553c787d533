// The coordinator dies with its node (SIGKILL of node 0, which embeds it): the lowest
// surviving node of the coordinator's record takes over within seconds, adopts the running
// epoch, the others follow it, the job shrinks to the survivors and ends bit-identical.
#include <catch2/catch.hpp>

#include <thread>

#include "tests/multinode/checks.h"
#include "tests/multinode/cluster.h"

using namespace shardguard::testing::multinode;
using namespace std::chrono_literals;

TEST_CASE(
    "The node that embeds the coordinator is SIGKILLed: node 1 takes over from the record, "
    "the job goes on on the survivors and ends bit-identical",
    "[multinode][integration]") {
  ClusterOptions o;
  o.nodes = 3;
  o.nnodes = "2:3";
  // Successors take over 2 s into the absence; a node gives up (stops its ranks) only after
  // coordinator_timeout, which must be longer.
  o.job_config = "coordinator_timeout = \"30s\"\n";
  o.trainer_args = {"--steps", "900", "--rows", "64", "--log-every", "0", "--sleep-ms", "5"};
  Cluster c(o);
  c.start_all();
  REQUIRE(wait_event_type(c, "checkpoint_committed", 60s));
  const auto killed = c.kill_node(0);
  const int64_t killed_at = wall_ms_now();
  CHECK(killed.size() >= 2);  // the supervisor (and coordinator) and its rank

  // Node 1's own timeline: it took over, listening on its own address.
  std::optional<shardguard::supervisor::EventRecord> takeover;
  for (int i = 0; i < 300 && !takeover; ++i) {
    for (const auto& e : c.node_events(1))
      if (e.type == "takeover") takeover = e;
    if (!takeover) std::this_thread::sleep_for(100ms);
  }
  INFO(c.logs());
  REQUIRE(takeover);
  const int64_t control_back_ms = takeover->time_unix_ms - killed_at;
  WARN("coordinator killed -> node 1 took over in " << control_back_ms << " ms");
  CHECK(control_back_ms < 5000);  // 2 s into the absence + the record read
  CHECK_THAT(field(*takeover, "listen"), Catch::Contains(c.address(1)));

  // Nodes 1 and 2 finish the job; node 0 (its ranks and the coordinator) is gone for good.
  CHECK(c.wait(1, 180s) == 0);
  CHECK(c.wait(2, 60s) == 0);
  const auto events = c.node_events(1);
  bool shrunk = false;
  for (const auto& e : of_type(events, "launch")) shrunk = shrunk || field(e, "nodes") == "1,2";
  CHECK(shrunk);
  const auto last = checkpoints(c.ckpt()).back();
  CHECK(last.step == 900);
  CHECK(final_hash(c.ckpt()) == row_parallel_reference(o.trainer_args));
}
