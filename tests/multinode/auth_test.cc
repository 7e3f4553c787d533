// The network plane of a multi-node job against an outsider: a node started with the wrong
// secret is refused (it retries until coordinator_timeout, then exits 78; the coordinator logs
// the failed handshakes) and the job does not notice; a node<->coordinator session recorded by a
// proxy on the path and replayed - the whole session on a new connection, or one captured frame
// into the live connection - is rejected and logged, and the job goes on to a bit-identical end.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>

#include "tests/multinode/checks.h"
#include "tests/multinode/cluster.h"
#include "tests/multinode/session_proxy.h"
#include "tests/support/command.h"

using namespace shardguard::testing;
using namespace shardguard::testing::multinode;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> train_args(int steps, bool allreduce = false) {
  std::vector<std::string> a = {"--steps", std::to_string(steps), "--rows", "64", "--log-every",
                                "0",       "--sleep-ms",          "5"};
  if (allreduce) a.push_back("--allreduce");
  return a;
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Sends `bytes` on a new connection to 127.0.0.1:port; true once the server closed it
// (within 10 s).
bool send_and_wait_close(uint16_t port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  bool closed = false;
  const auto until = std::chrono::steady_clock::now() + 10s;
  char buf[4096];
  while (!closed && std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    closed = ::recv(fd, buf, sizeof buf, 0) <= 0;
  }
  ::close(fd);
  return closed;
}

}  // namespace

TEST_CASE(
    "A node with a wrong secret is refused: it exits 78, the coordinator logs the failed "
    "handshake, the job is unaffected",
    "[multinode][integration]") {
  ClusterOptions o;
  o.nodes = 3;
  o.nnodes = "3";
  // A peer that fails the handshake proves only that one of the two lacks the secret (anyone
  // can bind an address first): the node retries until coordinator_timeout, then exits 78.
  o.job_config = "coordinator_timeout = \"8s\"\n";
  o.trainer_args = train_args(600);
  Cluster c(o);
  c.start_all();
  REQUIRE(wait_event_type(c, "launch", 60s));
  // An intruder that claims node rank 1 (a member's) with a secret of its own.
  const std::string wrong = c.tmp() / "wrong-secret";
  REQUIRE(run_command(shardguard_bin() + " secret generate " + wrong).exit_code == 0);
  auto argv = c.node_argv(1, wrong);
  const auto run_dir = std::find(argv.begin(), argv.end(), std::string("--run-dir"));
  REQUIRE(run_dir != argv.end());
  *(run_dir + 1) = c.tmp() / "run-intruder";
  Background intruder(argv, c.tmp() / "intruder.log");
  const auto code = intruder.wait(30s);
  INFO(slurp(c.tmp() / "intruder.log"));
  CHECK(code == 78);
  CHECK_THAT(slurp(c.tmp() / "intruder.log"),
             Catch::Contains("could not authenticate with the coordinator"));
  CHECK_THAT(slurp(c.tmp() / "intruder.log"),
             Catch::Contains("check that every node has the job's secret file"));

  REQUIRE(c.wait_all(0, 120s));
  CHECK_THAT(c.log(0), Catch::Contains("handshake failed"));
  const auto events = c.events();
  CHECK(of_type(events, "launch").size() == 1);
  CHECK(of_type(events, "node_joined").size() == 3);
  CHECK(of_type(events, "node_lost").empty());
  CHECK(final_hash(c.ckpt()) == row_parallel_reference(o.trainer_args));
}

TEST_CASE(
    "A recorded node<->coordinator session replayed: on a new connection it fails the "
    "handshake, one frame injected into the live connection is rejected as replayed; both "
    "are logged and the job ends bit-identical",
    "[multinode][integration]") {
  // The all-reducing trainer: when the closed connection tears the epoch down, node 2's rank
  // loses its peers and exits by itself before the node rejoins, which keeps this test clear
  // of the stale-teardown race that the row-parallel case shows (sigstop_test.cc, [!mayfail]).
  ClusterOptions o;
  o.nodes = 3;
  o.nnodes = "3";
  o.trainer_args = train_args(1200, true);
  Cluster c(o);
  SessionProxy proxy(c.rdzv_port());
  c.set_endpoint(2, "127.0.0.1:" + std::to_string(proxy.port()));
  c.start_all();
  REQUIRE(wait_event_type(c, "checkpoint_committed", 60s));
  // The node's session through the proxy (an earlier connection may have found the
  // coordinator not listening yet).
  size_t session = 0;
  REQUIRE(eventually(
      [&] {
        for (size_t i = 0; i < proxy.connections(); ++i)
          if (proxy.frames(i).size() >= 4) {
            session = i;
            return true;
          }
        return false;
      },
      10000ms));

  // 1. The whole session so far (hello, response, frames) on a new connection: the
  //    coordinator's fresh nonce makes the old response fail; the job does not notice.
  const size_t refused_before = count(c.log(0), "handshake failed");
  CHECK(send_and_wait_close(c.rdzv_port(), proxy.raw(session)));
  CHECK(eventually([&] { return count(c.log(0), "handshake failed") > refused_before; }, 5000ms));
  CHECK(of_type(c.events(), "node_lost").empty());
  CHECK(of_type(c.events(), "launch").size() == 1);

  // 2. Frame 1 of the live session again, between two of the node's frames: rejected as a
  //    replay (its sequence number was seen), logged, and never delivered. The channel then
  //    closes the connection (nothing after a bad frame can be trusted); the node reconnects.
  const auto frames = proxy.frames(session);
  REQUIRE(proxy.inject(session, frames.at(1), 5000ms));
  CHECK(eventually([&] { return c.log(0).find("replayed frame (sequence 1") != std::string::npos; },
                   5000ms));
  CHECK(eventually([&] { return proxy.connections() > session + 1; }, 10000ms));

  CHECK(eventually(
      [&] {
        int joins = 0;
        for (const auto& e : of_type(c.events(), "node_joined")) joins += field(e, "node") == "2";
        return joins == 2;
      },
      10000ms));
  // What the replay costs: the closed connection is a lost node, so the epoch is torn down and
  // relaunched from its last checkpoint as node 2 rejoins - at once, which can hit the
  // NodeRunner relaunch race (reported; see wait_all_unless_race). Until that is fixed the
  // end is checked without failing, and fully whenever the job gets there.
  const bool ended = wait_all_unless_race(c, 0, 120s);
  CHECK_NOFAIL(ended);
  if (!ended) return;
  const auto events = c.events();
  CHECK_NOFAIL(of_type(events, "launch").size() == 2);
  for (const auto& e : of_type(events, "attempt_end")) CHECK_NOFAIL(field(e, "class") != "crash");
  check_history(events, c.ckpt());
  CHECK(final_hash(c.ckpt()) == allreduce_reference(o.trainer_args, 3));
}
