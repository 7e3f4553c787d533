// The timeline's view of a multi-node job's nodes (NodeView), from hand-written records.
#include <catch2/catch.hpp>

#include "supervisor/timeline.h"
#include "tests/supervisor/timeline_lines.h"

using namespace shardguard::supervisor;

TEST_CASE("Nodes of a multi-node job: placed, lost, back, notified, stopped", "[timeline][unit]") {
  auto t = feed({
      L(0, "start", R"j("job_id":"j","nproc":6,"first_attempt":0)j"),
      L(10, "node_joined", R"j("node":0,"address":"10.0.0.1","nodes":1)j"),
      L(20, "node_joined", R"j("node":1,"address":"10.0.0.2","nodes":2)j"),
      L(30, "node_joined", R"j("node":2,"address":"10.0.0.3","nodes":3)j"),
      L(100, "launch", R"j("attempt":0,"nproc":6,"nodes":"0,1,2","resume_step":-1)j"),
      L(5000, "node_lost", R"j("node":1,"why":"no heartbeat for 3 s","nodes":2)j"),
      L(5100, "launch", R"j("attempt":1,"nproc":4,"nodes":"0,2","resume_step":100)j"),
  });
  auto v = t.view(6000);
  REQUIRE(v.nodes.size() == 3);
  CHECK(v.nodes[0].state == "running");
  CHECK(v.nodes[0].address == "10.0.0.1");
  CHECK(v.nodes[0].attempt == std::optional<uint64_t>(1));
  CHECK(v.nodes[0].node_rank == std::optional<uint32_t>(0));
  CHECK(v.nodes[1].state == "lost");
  CHECK(v.nodes[1].why == "no heartbeat for 3 s");
  CHECK(v.nodes[1].attempt == std::optional<uint64_t>(0));
  CHECK(v.nodes[1].since_unix_ms == 5000);
  CHECK(v.nodes[2].node_rank == std::optional<uint32_t>(1));  // renumbered densely
  t.add_line(L(7000, "node_joined", R"j("node":1,"address":"10.0.0.2","nodes":3)j"));
  CHECK(t.view(7000).nodes[1].state == "waiting");  // back, placed at the next launch
  t.add_line(L(8000, "notice",
               R"j("node":2,"source":"aws","kind":"spot-interruption","action":"stop","preemption":true)j"));
  CHECK(t.view(8000).nodes[2].state == "notified");
  CHECK(t.view(8000).nodes[2].why == "aws spot-interruption");
  t.add_line(L(9000, "finish", R"j("state":"preempted","exit_code":75)j"));
  for (const auto& n : t.view(9000).nodes) CHECK((n.state == "stopped" || n.state == "lost"));
  CHECK(t.view(9000).nodes[1].state == "stopped");
}

TEST_CASE(
    "A fixed-size job that lost a node: it waits for nodes (not backoff), counted as waiting, "
    "the others are not shown running",
    "[timeline][unit]") {
  auto t = feed({
      L(0, "start", R"j("job_id":"j","nproc":3,"first_attempt":0)j"),
      L(10, "node_joined", R"j("node":0,"address":"10.0.0.1","nodes":1)j"),
      L(20, "node_joined", R"j("node":1,"address":"10.0.0.2","nodes":2)j"),
      L(30, "node_joined", R"j("node":2,"address":"10.0.0.3","nodes":3)j"),
      L(100, "launch", R"j("attempt":0,"nproc":3,"nodes":"0,1,2","resume_step":-1)j"),
      L(1100, "ranks_ready", R"j("attempt":0)j"),
      L(5000, "node_lost", R"j("node":2,"why":"connection closed","nodes":2)j"),
      L(5000, "teardown", R"j("attempt":0,"why":"node 2 lost")j"),
      L(5500, "attempt_end", R"j("attempt":0,"class":"infrastructure","max_step":50)j"),
      L(5500, "backoff", R"j("seconds":1,"why":"node 2 lost")j"),
      L(6500, "waiting_for_nodes", R"j("nodes":2,"min_nodes":3)j"),
  });
  const auto v = t.view(66500);  // a minute later
  CHECK(v.state == "waiting for nodes (2 of 3)");
  CHECK(v.nodes.at(0).state == "waiting");
  CHECK(v.nodes.at(1).state == "waiting");
  CHECK(v.nodes.at(2).state == "lost");
  const auto g = t.goodput(66500);
  // The minute is waiting for a node, not restarting (3 GPUs x 60 s).
  CHECK(g.badput(shardguard::policies::Badput::kWaiting) >= 3 * 60.0 - 1e-6);
  CHECK(g.badput(shardguard::policies::Badput::kRestart) < 3 * 4.0);  // the teardown, the launch
}

TEST_CASE("A successor's run directory knows the last checkpoint from the take-over",
          "[timeline][unit]") {
  auto t = feed({
      L(0, "start", R"j("job_id":"j","nproc":2,"first_attempt":0)j"),
      L(10, "adopt", R"j("attempt":3,"running":true,"nodes":2,"last_committed":1200)j"),
  });
  const auto v = t.view(100);
  REQUIRE(v.last_checkpoint);
  CHECK(v.last_checkpoint->step == 1200);
}
