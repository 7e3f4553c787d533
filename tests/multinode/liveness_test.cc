// Nodes that cannot reach or become the coordinator (issue 26: item 4, faults n6 and n3c):
// node rank 0 given an endpoint that is not its own says at once that it expects a
// standalone coordinator; a node that never reaches one says so in a few lines, honours
// SIGTERM at once and ends at coordinator_timeout; nodes whose node 0 refused at start never
// take over from an earlier run's record and end; a node 0 restarted after its successor took
// over joins that successor instead of refusing, and the job ends bit-identical.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <thread>

#include "tests/multinode/checks.h"
#include "tests/multinode/cluster.h"
#include "tests/support/background.h"
#include "tests/support/command.h"
#include "tests/support/fixture_text.h"
#include "tests/support/temp_dir.h"

using namespace shardguard::testing;
using namespace shardguard::testing::multinode;
using namespace std::chrono_literals;

namespace {

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

std::vector<std::string> train_args(int steps) {
  return {"--steps", std::to_string(steps), "--rows", "64", "--log-every", "0", "--sleep-ms", "5"};
}

// Runs `exit_code = c.wait(k, timeout)` and how long it took.
std::pair<int, std::chrono::milliseconds> timed_wait(Cluster& c, int k,
                                                     std::chrono::milliseconds timeout) {
  const auto t0 = std::chrono::steady_clock::now();
  const int code = c.wait(k, timeout);
  return {code, std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - t0)};
}

}  // namespace

TEST_CASE(
    "No coordinator at the endpoint: node rank 0 says at once that it expects a standalone "
    "one; a node that never reaches it honours SIGTERM at once, logs a few lines and ends at "
    "coordinator_timeout",
    "[multinode][integration]") {
  ClusterOptions o;
  o.nodes = 2;
  o.nnodes = "2";
  o.rdzv_host = "127.0.0.9";  // no node's address, and nobody listens there
  o.job_config = "coordinator_timeout = \"8s\"\n";
  o.trainer_args = train_args(100);
  Cluster c(o);
  c.start(0);
  c.start(1);
  INFO(c.logs());
  CHECK(eventually(
      [&] {
        return c.log(0).find("node rank 0 does not run the coordinator") != std::string::npos;
      },
      5000ms));
  CHECK_THAT(c.log(0),
             Catch::Contains("expects a standalone `shardguard coordinator` at 127.0.0.9"));

  // SIGTERM (a scheduler's, a person's) to a node that never joined: it ends at once.
  std::this_thread::sleep_for(3s);
  REQUIRE(::kill(c.pid(1), SIGTERM) == 0);
  const auto [term_code, term_took] = timed_wait(c, 1, 10s);
  CHECK(term_code == 75);
  CHECK(term_took < 3s);
  CHECK_THAT(c.log(1), Catch::Contains("no coordinator was ever reached"));

  // Node 0 tries twice a second; the log says so once per 10 s, naming the endpoint and that
  // it was never reached, and the node ends when coordinator_timeout has passed.
  const auto [code, took] = timed_wait(c, 0, 20s);
  CHECK(code == 75);
  CHECK_THAT(c.log(0), Catch::Contains("cannot reach the coordinator at 127.0.0.9:"));
  CHECK_THAT(c.log(0), Catch::Contains("none reached since this node started"));
  CHECK_THAT(c.log(0), Catch::Contains("no coordinator answered at 127.0.0.9:"));
  CHECK(count(c.log(0), "cannot reach the coordinator") <= 2);
  CHECK(count(c.log(0), "lost the coordinator") == 0);
}

TEST_CASE(
    "Node 0 refuses at start (its run directory is held): the other nodes never take over from "
    "the earlier run's record and end at coordinator_timeout",
    "[multinode][integration]") {
  ClusterOptions o;
  o.nodes = 3;
  o.nnodes = "3";
  o.job_config = "coordinator_timeout = \"8s\"\n";
  o.trainer_args = train_args(100);
  Cluster c(o);
  c.start_all();
  INFO(c.logs());
  REQUIRE(c.wait_all(0, 120s));  // the earlier run: it leaves a coordinator record

  // The requeued job: node 0's run directory is held by another process (as a full disk or a
  // second supervisor would refuse it), so node 0 exits 78 at once.
  const std::string lock = c.run_dir(0) + "/lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  c.start_all();
  CHECK(c.wait(0, 20s) == 78);
  const auto [code1, took1] = timed_wait(c, 1, 30s);
  const auto [code2, took2] = timed_wait(c, 2, 10s);
  ::close(fd);
  CHECK(code1 == 75);
  CHECK(code2 == 75);
  CHECK(took1 < 15s);
  for (int k : {1, 2}) {
    INFO("node " << k);
    CHECK(count(c.log(k), "taking over") == 0);
    CHECK(count(c.log(k), "cannot take over") == 0);
    CHECK_THAT(c.log(k), Catch::Contains("no coordinator answered at"));
  }
}

TEST_CASE(
    "The coordinator's node dies, node 1 takes over, node 0 starts again: it joins node 1 "
    "instead of refusing on the lease, the job grows back and ends bit-identical",
    "[multinode][integration]") {
  ClusterOptions o;
  o.nodes = 3;
  o.nnodes = "2:3";
  o.job_config = "coordinator_timeout = \"30s\"\n";
  o.trainer_args = train_args(3000);
  Cluster c(o);
  c.start_all();
  INFO(c.logs());
  REQUIRE(wait_event_type(c, "checkpoint_committed", 60s));
  c.kill_node(0);
  REQUIRE(eventually(
      [&] {
        for (const auto& e : c.node_events(1))
          if (e.type == "takeover") return true;
        return false;
      },
      30000ms));
  c.start(0);
  CHECK(eventually(
      [&] {
        return c.log(0).find("as the job's coordinator (it took over): joining it") !=
               std::string::npos;
      },
      20000ms));
  // Node 1's coordinator admits node 0 again: a launch on all three nodes after the take-over.
  CHECK(eventually(
      [&] {
        bool after_takeover = false;
        for (const auto& e : c.node_events(1)) {
          if (e.type == "takeover") after_takeover = true;
          if (after_takeover && e.type == "launch" && field(e, "nodes") == "0,1,2") return true;
        }
        return false;
      },
      60000ms));
  CHECK(c.wait(1, 180s) == 0);
  CHECK(c.wait(0, 30s) == 0);
  CHECK(c.wait(2, 30s) == 0);
  CHECK(checkpoints(c.ckpt()).back().step == 3000);
  CHECK(final_hash(c.ckpt()) == row_parallel_reference(o.trainer_args));
}

TEST_CASE(
    "A party without the secret holds the first successor's address when the coordinator "
    "dies: the take-over goes on to the next node instead of the nodes exiting 78, and the job "
    "ends bit-identical",
    "[multinode][integration]") {
  ClusterOptions o;
  o.nodes = 3;
  o.nnodes = "2:3";
  o.job_config = "coordinator_timeout = \"30s\"\n";
  o.trainer_args = train_args(3000);
  Cluster c(o);
  // The squatter: a coordinator of its own (its own secret and checkpoint directory) on node
  // 1's address and the job's port, where node 1 would listen after a take-over.
  const std::string wrong = c.tmp() / "squatter-secret";
  REQUIRE(run_command(shardguard_bin() + " secret generate " + wrong).exit_code == 0);
  const std::string squat_config = c.tmp() / "squatter.toml";
  REQUIRE(
      write_text(squat_config, "[job]\ncheckpoint_dir = \"" + (c.tmp() / "squatter-ckpt") + "\"\n")
          .ok());
  Background squatter(
      {shardguard_bin(), "coordinator", "--listen",
       c.address(1) + ":" + std::to_string(c.rdzv_port()), "--nnodes", "2", "--nproc-per-node", "1",
       "--config", squat_config, "--run-dir", c.tmp() / "squatter-run", "--secret-file", wrong},
      c.tmp() / "squatter.log");
  c.start_all();
  INFO(c.logs() << slurp(c.tmp() / "squatter.log"));
  REQUIRE(wait_event_type(c, "checkpoint_committed", 60s));
  c.kill_node(0);
  // Node 2 met the squatter's challenge at node 1's address (it exited 78 there before),
  // went on to the next successor, itself, and node 1 follows it.
  CHECK(c.wait(2, 180s) == 0);
  CHECK(c.wait(1, 60s) == 0);
  CHECK_THAT(c.log(2),
             Catch::Contains("cannot reach the coordinator at " + c.address(1) + ":" +
                             std::to_string(c.rdzv_port()) + " (could not authenticate with it"));
  CHECK_THAT(c.log(2), Catch::Contains("node 2: the coordinator is gone; taking over"));
  CHECK(checkpoints(c.ckpt()).back().step == 3000);
  CHECK(final_hash(c.ckpt()) == row_parallel_reference(o.trainer_args));
}
