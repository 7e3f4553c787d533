// The coordinator dies with its node (SIGKILL of node 0, which embeds it): the lowest
// surviving node of the coordinator's record takes over within seconds, adopts the running
// epoch, the others follow it, the job shrinks to the survivors and ends bit-identical.
#include <catch2/catch.hpp>

#include <csignal>
#include <memory>
#include <thread>

#include "tests/multinode/checks.h"
#include "tests/multinode/cluster.h"
#include "tests/support/background.h"
#include "tests/support/command.h"

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

TEST_CASE(
    "A standalone coordinator is SIGKILLed and started again: it adopts the running epoch "
    "from its record within 5 s, the ranks never stop, the job ends bit-identical",
    "[multinode][integration]") {
  ClusterOptions o;
  o.nodes = 2;
  o.nnodes = "2";
  // An address no node holds: node rank 0 does not embed a coordinator; the standalone one
  // listens there.
  o.rdzv_host = "127.0.0.9";
  o.job_config = "coordinator_timeout = \"30s\"\n";
  o.trainer_args = {"--steps", "900", "--rows", "64", "--log-every", "0", "--sleep-ms", "5"};
  Cluster c(o);
  const std::string run_dir = c.tmp() / "coordinator-run";
  const std::vector<std::string> argv = {
      shardguard::testing::shardguard_bin(), "coordinator", "--listen",
      o.rdzv_host + ":" + std::to_string(c.rdzv_port()), "--nnodes", "2", "--nproc-per-node", "1",
      "--config", c.config(), "--run-dir", run_dir, "--secret-file", c.secret(), "--job-id",
      c.job_id(), "--join-window", "20s"};
  auto timeline = [&] {
    auto e = shardguard::supervisor::read_events(run_dir + "/events.jsonl");
    return e.ok() ? *e : std::vector<EventRecord>{};
  };
  auto wait_for = [&](const std::string& type, size_t nth) -> std::optional<EventRecord> {
    for (int i = 0; i < 1200; ++i) {
      auto found = of_type(timeline(), type);
      if (found.size() > nth) return found[nth];
      std::this_thread::sleep_for(50ms);
    }
    return std::nullopt;
  };
  auto coordinator = std::make_unique<shardguard::testing::Background>(
      argv, c.tmp() / "coordinator.log");
  c.start_all();
  INFO(shardguard::testing::slurp(c.tmp() / "coordinator.log") << c.logs());
  REQUIRE(wait_for("checkpoint_committed", 0));
  const auto launches_before = of_type(timeline(), "launch").size();

  coordinator->signal(SIGKILL);
  REQUIRE(coordinator->wait(10s).has_value());
  const int64_t killed_at = wall_ms_now();
  std::this_thread::sleep_for(300ms);  // a restart by systemd or a Deployment, a moment later
  coordinator = std::make_unique<shardguard::testing::Background>(argv,
                                                                  c.tmp() / "coordinator.log");
  const auto adopt = wait_for("adopt", 0);
  REQUIRE(adopt);
  CHECK(field(*adopt, "running") == "true");
  // Control is back when both nodes are members again.
  std::optional<EventRecord> rejoined;
  for (int i = 0; i < 200 && !rejoined; ++i) {
    for (const auto& e : of_type(timeline(), "node_joined"))
      if (e.time_unix_ms >= adopt->time_unix_ms && field(e, "nodes") == "2") rejoined = e;
    if (!rejoined) std::this_thread::sleep_for(50ms);
  }
  REQUIRE(rejoined);
  const int64_t control_back_ms = rejoined->time_unix_ms - killed_at;
  WARN("standalone coordinator killed -> restarted one in control of both nodes in "
       << control_back_ms << " ms (300 ms of it before the restart)");
  CHECK(control_back_ms < 5000);

  // The epoch was adopted, not relaunched: no launch between the kill and the next commit.
  REQUIRE(wait_for("checkpoint_committed", of_type(timeline(), "checkpoint_committed").size()));
  CHECK(of_type(timeline(), "launch").size() == launches_before);
  CHECK(c.wait(0, 180s) == 0);
  CHECK(c.wait(1, 60s) == 0);
  CHECK(coordinator->wait(30s) == std::optional<int>(0));
  CHECK(checkpoints(c.ckpt()).back().step == 900);
  CHECK(final_hash(c.ckpt()) == row_parallel_reference(o.trainer_args));
}
