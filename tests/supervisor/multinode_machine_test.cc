// The decision core across nodes, in made-up time: dense renumbering at each epoch, a lost node
// tears every node down and the job relaunches on the survivors (MIN:MAX), waits below MIN,
// grows again at a checkpoint boundary, and a notice on one node reaches every rank.
#include <catch2/catch.hpp>

#include "core/exit_codes.h"
#include "tests/supervisor/machine_driver.h"

using namespace shardguard;
using namespace shardguard::testing;

namespace {

MachineConfig elastic(uint32_t min_nodes, uint32_t max_nodes) {
  MachineConfig c;
  c.nproc_per_node = 2;
  c.min_nodes = min_nodes;
  c.max_nodes = max_nodes;
  c.backoff = {1s, 60s, 2.0, 0.0};
  c.join_window = 5s;
  c.rendezvous_timeout = 60s;
  return c;
}

void join(MachineDriver& d, NodeId n) { d.feed(event::NodeJoined{n, "host" + std::to_string(n)}); }

// Nodes 1, 2 and 3 joined and launched from a fresh start.
void start_three(MachineDriver& d) {
  d.start();
  for (NodeId n : {1u, 2u, 3u}) join(d, n);
  d.resume(std::nullopt);
  d.launched();
}

}  // namespace

TEST_CASE("the job launches when MAX nodes joined, or MIN after the join window",
          "[machine][multinode][unit]") {
  MachineDriver d(elastic(2, 3));
  d.start();
  join(d, 10);
  CHECK(d.all_of<command::FindResume>().empty());
  SECTION("max reached: at once") {
    join(d, 11);
    CHECK(d.all_of<command::FindResume>().empty());
    join(d, 12);
    REQUIRE(d.all_of<command::FindResume>().size() == 1);
    d.resume(std::nullopt);
    auto l = d.last<command::Launch>();
    REQUIRE(l->nodes.size() == 3);
    CHECK(l->world_size == 6);
    CHECK(l->master_addr == "host10");
    CHECK(l->nodes[2].node == 12);
    CHECK(l->nodes[2].node_rank == 2);
    CHECK(l->nodes[2].first_rank == 4);
  }
  SECTION("min reached: after the join window") {
    join(d, 11);
    d.advance(4s);
    CHECK(d.all_of<command::FindResume>().empty());
    d.advance(1s);
    REQUIRE(d.all_of<command::FindResume>().size() == 1);
    d.resume(std::nullopt);
    CHECK(d.last<command::Launch>()->world_size == 4);
  }
}

TEST_CASE("a lost node tears down every node; the survivors relaunch renumbered, resharded",
          "[machine][multinode][unit]") {
  MachineDriver d(elastic(2, 3));
  d.start();
  for (NodeId n : {1u, 2u, 3u}) join(d, n);
  d.resume(100);
  d.launched();
  d.beat(150);
  d.feed(event::NodeLost{2, "no heartbeat for 3 s"});
  auto td = d.last<command::TearDown>();
  REQUIRE(td);
  CHECK_THAT(td->why, Catch::Contains("node 2 lost"));
  // Nodes 1 and 3 confirm; node 2 cannot, and need not.
  d.feed(event::NodeStopped{d.epoch(), 1});
  CHECK(d.machine().phase() == Phase::kStopping);
  d.feed(event::NodeStopped{d.epoch(), 3});
  CHECK(d.last_field("attempt_end", "class") == "infrastructure");
  d.advance(*d.timer_in(TimerId::kBackoff));
  d.resume(100);
  auto l = d.last<command::Launch>();
  REQUIRE(l->nodes.size() == 2);
  CHECK(l->world_size == 4);
  CHECK(l->nodes[0].node == 1);
  CHECK(l->nodes[1].node == 3);
  CHECK(l->nodes[1].node_rank == 1);  // dense, survivors keep their order
  CHECK(l->epoch == 1);
}

TEST_CASE("below MIN: wait for nodes up to the rendezvous timeout, then exit 75",
          "[machine][multinode][unit]") {
  MachineDriver d(elastic(2, 2));
  d.start();
  join(d, 1);
  join(d, 2);
  d.resume(std::nullopt);
  d.launched();
  d.feed(event::NodeLost{2, "connection reset"});
  d.feed(event::NodeStopped{d.epoch(), 1});
  d.advance(*d.timer_in(TimerId::kBackoff));
  CHECK(d.machine().phase() == Phase::kPending);
  SECTION("the node comes back in time") {
    d.advance(30s);
    join(d, 2);
    REQUIRE(d.last<command::FindResume>()->epoch == 1);
  }
  SECTION("it does not") {
    d.advance(60s);
    REQUIRE(d.machine().finished());
    CHECK(d.machine().exit_code() == kExitPreempted);
    CHECK_THAT(d.last<command::Finish>()->summary, Catch::Contains("for 2 node(s); 1 available"));
  }
}

TEST_CASE("a node that returns grows the job at the next checkpoint", "[machine][multinode][unit]") {
  MachineDriver d(elastic(1, 2));
  d.start();
  join(d, 1);
  d.advance(5s);
  d.resume(std::nullopt);
  d.launched();
  CHECK(d.world() == 2);
  d.beat(10);
  join(d, 2);
  CHECK(d.all_of<command::TearDown>().empty());  // not at once: at a checkpoint boundary
  d.commit(10);
  auto td = d.last<command::TearDown>();
  REQUIRE(td);
  CHECK_THAT(td->why, Catch::Contains("growing from 1 to 2 nodes"));
  d.confirm_teardown();
  CHECK(d.last_field("attempt_end", "class") == "resize");
  CHECK(d.timer_in(TimerId::kBackoff) == Duration(0));
  d.advance(0s);
  d.resume(10);
  CHECK(d.last<command::Launch>()->world_size == 4);
  CHECK(d.machine().stats(d.now()).restarts.count("crash") == 0);
}

TEST_CASE("a notice on one node: one global emergency checkpoint, then that node leaves",
          "[machine][multinode][unit]") {
  MachineDriver d(elastic(2, 3));
  d.start();
  for (NodeId n : {1u, 2u, 3u}) join(d, n);
  d.resume(std::nullopt);
  d.launched();
  d.beat(20);
  d.notice(30s, "spot-interruption", 3);
  auto c = d.last<command::CheckpointNow>();
  REQUIRE(c);
  CHECK(c->epoch == d.epoch());  // one command for every rank of every node
  d.commit(c->at_step);
  for (uint32_t r = 0; r < 6; ++r) d.exit_rank(r, 75);
  d.confirm_teardown();
  CHECK_FALSE(d.machine().finished());
  CHECK(d.records("shrink").size() == 1);
  // The notified node is released: its supervisor exits instead of idling to the job's end.
  auto released = d.all_of<command::Release>();
  REQUIRE(released.size() == 1);
  CHECK(released[0].node == 3);
  CHECK(d.last_field("node_released", "node") == "3");
  d.advance(*d.timer_in(TimerId::kBackoff));
  d.resume(c->at_step);
  auto l = d.last<command::Launch>();
  REQUIRE(l->nodes.size() == 2);
  CHECK(l->nodes[0].node == 1);
  CHECK(l->nodes[1].node == 2);
}

TEST_CASE("a notice on every node, below MIN after they leave: the job exits 75",
          "[machine][multinode][unit]") {
  MachineDriver d(elastic(2, 2));
  d.start();
  join(d, 1);
  join(d, 2);
  d.resume(std::nullopt);
  d.launched();
  d.beat(5);
  d.notice(30s, "sigterm", 1);
  d.notice(30s, "sigterm", 2);
  d.commit(d.last<command::CheckpointNow>()->at_step);
  d.confirm_teardown();
  REQUIRE(d.machine().finished());
  CHECK(d.machine().exit_code() == kExitPreempted);
}

TEST_CASE("a node that does not confirm the teardown in time is declared lost",
          "[machine][multinode][unit]") {
  MachineConfig c = elastic(1, 2);
  c.stop_timeout = 20s;
  MachineDriver d(c);
  d.start();
  join(d, 1);
  join(d, 2);
  d.resume(std::nullopt);
  d.launched();
  d.exit_rank(0, 1);
  d.feed(event::NodeStopped{d.epoch(), 1});
  d.advance(20s);
  CHECK(d.last_field("node_lost", "node") == "2");
  CHECK(d.machine().phase() == Phase::kBackoff);
}

TEST_CASE("a successor coordinator adopts the running epoch; nodes that do not come back are lost",
          "[machine][multinode][unit]") {
  MachineConfig c = elastic(2, 3);
  c.restart.crash = {2, std::chrono::hours(1)};
  MachineDriver d(c);
  d.start();
  for (NodeId n : {1u, 2u, 3u}) join(d, n);
  d.resume(100);
  d.launched();
  d.beat(150);
  d.commit(150);
  // One crash already granted, which the successor must remember.
  d.exit_rank(0, 1);
  d.confirm_teardown();
  d.advance(*d.timer_in(TimerId::kBackoff));
  d.resume(150);
  d.launched();
  d.beat(160);
  const CoordinatorState state = d.machine().snapshot(d.now());
  CHECK(state.running);
  CHECK(state.epoch == 1);
  CHECK(state.layout.size() == 3);
  CHECK(state.last_committed == 150u);
  CHECK(state.restarts.at("crash").size() == 1);

  MachineDriver s(c);
  s.adopt(state);
  CHECK(s.machine().phase() == Phase::kRunning);
  CHECK(s.machine().runs_on(2, 1));
  CHECK(s.all_of<command::Launch>().empty());  // no relaunch: the ranks keep training
  s.feed(event::NodeJoined{2, "host2"});
  s.feed(event::NodeJoined{3, "host3"});
  s.advance(5s);  // node 1 (the old coordinator's node) never comes back
  auto td = s.last<command::TearDown>();
  REQUIRE(td);
  CHECK_THAT(td->why, Catch::Contains("node 1 lost"));
  for (NodeId n : {2u, 3u}) s.feed(event::NodeStopped{1, n});
  // The crash budget carried over: one more crash is granted, then it is spent.
  CHECK(s.machine().stats(s.now()).restarts.count("infrastructure") == 1);
  s.advance(*s.timer_in(TimerId::kBackoff));
  s.resume(150);
  auto l = s.last<command::Launch>();
  REQUIRE(l);
  CHECK(l->epoch == 2);
  CHECK(l->nodes.size() == 2);
}

TEST_CASE(
    "after a take-over the adopted epoch's lost steps count from its last commit, and no notice "
    "is claimed where none came",
    "[machine][multinode][unit]") {
  MachineConfig c = elastic(2, 3);
  MachineDriver d(c);
  start_three(d);
  d.beat(200);
  d.commit(200);
  d.beat(210);
  const CoordinatorState state = d.machine().snapshot(d.now());
  REQUIRE(state.last_committed == 200u);

  MachineDriver s(c);
  s.adopt(state);
  s.feed(event::NodeJoined{2, "host2"});
  s.feed(event::NodeJoined{3, "host3"});
  s.feed(event::Heartbeats{s.epoch(), {{0, 239, {}}, {1, 239, {}}, {2, 239, {}}}, std::nullopt});
  s.advance(5s);  // node 1 never comes back: the epoch is torn down
  for (NodeId n : {2u, 3u}) s.feed(event::NodeStopped{s.epoch(), n});
  CHECK(s.last_field("attempt_end", "lost_steps") == "39");  // 239 - 200, not 239 - 0
  CHECK(s.last_field("attempt_end", "committed_step") == "200");
  CHECK(s.last_field("attempt_end", "by_notice") == "false");
  CHECK(s.last_field("attempt_end", "blames_checkpoint") == "false");  // a node lost
}

TEST_CASE(
    "a notice under way when the coordinator dies is in its record, and its successor takes it "
    "again with its deadline",
    "[machine][multinode][unit]") {
  MachineConfig c = elastic(2, 3);
  MachineDriver d(c);
  start_three(d);
  d.beat(100);
  const WallTime deadline = d.now().wall + 30s;
  d.notice(30s, "spot-interruption", 3, 7);
  REQUIRE(d.last<command::CheckpointNow>());
  const CoordinatorState state = d.machine().snapshot(d.now());
  REQUIRE(state.notices.size() == 1);
  CHECK(state.notices[0].node == 3);
  CHECK(state.notices[0].deadline == deadline);
  MachineDriver s(c);
  s.adopt(state);
  CHECK(s.records("notice_adopted").size() == 1);
  auto again = s.last<command::CheckpointNow>();
  REQUIRE(again);
  CHECK(again->kind == CheckpointKind::kEmergency);
  CHECK(again->deadline == deadline - 2s);  // the same deadline less the safety margin
  CHECK(s.timer_armed(TimerId::kDeadline));
}
