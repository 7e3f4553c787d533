// A same-uid neighbour on the control socket of a real `shardguard run` (findings of the
// hardening audit): a second `hello` as rank 0 from a process the run did not launch is
// refused, naming it, and idle connections beyond the cap (2 x ranks + 8) are closed; the
// real ranks keep their checkpoint requests: SIGTERM still gives one emergency checkpoint
// at the step the supervisor chose, and exit 75. With no rank connected at all, the pid
// binding alone refuses a neighbour's hello as rank 0.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "hooks/protocol.h"
#include "io/unix_socket_server.h"
#include "supervisor/rank_env.h"
#include "tests/run/run_fixture.h"
#include "tests/support/background.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::testing;

namespace {

std::string hello_line(uint32_t rank, uint32_t world, const std::string& job) {
  std::string s = hooks::encode(hooks::JobMessage{hooks::Hello{rank, world, ::getpid(), job, 0}});
  s.pop_back();  // send_line adds the newline
  return s;
}

// Says hello as rank 0 of 2 on `client` with the right job and attempt; the error it must get.
std::string hijack_rank0(io::UnixSocketClient& client, const std::string& job) {
  REQUIRE(client.send_line(hello_line(0, 2, job)).ok());
  auto reply = client.read_line(10s);
  REQUIRE(reply.ok());
  auto m = hooks::decode_agent_message(*reply);
  REQUIRE(m.ok());
  REQUIRE(std::holds_alternative<hooks::ErrorReply>(*m));
  return std::get<hooks::ErrorReply>(*m).message;
}

}  // namespace

TEST_CASE("a neighbour cannot speak for a rank or crowd the socket; the emergency checkpoint "
          "still reaches the real ranks",
          "[integration]") {
  RunDirs d;
  write_config(d, "", 50);
  const std::vector<std::string> train = {"--steps", "100000", "--rows", "64", "--log-every",
                                          "0", "--sleep-ms", "5"};
  Background run(run_argv(d, 2, train), d.log());
  REQUIRE(eventually([&] { return events_named(d, "hello").size() == 2; }, 30s));
  const std::string job = field(events_named(d, "start").at(0), "job_id");
  const std::string socket = supervisor::control_socket_path(d.run());

  // The hijack: a hello as rank 0 with the right job, attempt and world size.
  auto hijack = io::UnixSocketClient::connect(socket);
  REQUIRE(hijack.ok());
  // Refused while the real rank 0 is connected; a process the run did not launch is refused
  // even when rank 0's connection is gone (the pid binding: the next test case).
  CHECK_THAT(hijack_rank0(*hijack, job), Catch::Contains("rank 0 is already connected"));

  // The crowd: 2 ranks + the hijacker hold 3 of the 12; of 20 more, the last ones are closed.
  std::vector<io::UnixSocketClient> crowd;
  for (int i = 0; i < 20; ++i) {
    auto c = io::UnixSocketClient::connect(socket);
    if (c.ok()) crowd.push_back(std::move(*c));
  }
  int closed = 0;
  for (auto& c : crowd) {
    auto r = c.read_line(200ms);
    if (!r.ok() && r.error().code() != ErrorCode::kTimeout) ++closed;
  }
  CHECK(closed >= 10);

  run.signal(SIGTERM);
  const auto code = run.wait(60s);
  INFO(slurp(d.log()));
  REQUIRE(code == 75);
  const auto now = events_named(d, "checkpoint_now");
  const auto committed = events_named(d, "checkpoint_committed");
  REQUIRE_FALSE(now.empty());
  REQUIRE_FALSE(committed.empty());
  CHECK(field(committed.back(), "step") == field(now.back(), "at_step"));
}

TEST_CASE("with no rank connected, a neighbour's hello as rank 0 is refused by the pid binding",
          "[integration]") {
  RunDirs d;
  write_config(d, "", 50);
  // Ranks that never connect (not shardguard clients): rank 0's slot is free on the socket.
  Background run({shardguard_bin(), "run", "--config", d.config(), "--nproc", "2", "--", "sleep",
                  "1000"},
                 d.log());
  REQUIRE(eventually([&] { return !events_named(d, "launch").empty(); }, 30s));
  const std::string job = field(events_named(d, "start").at(0), "job_id");
  auto hijack = io::UnixSocketClient::connect(supervisor::control_socket_path(d.run()));
  REQUIRE(hijack.ok());
  INFO(slurp(d.log()));
  CHECK_THAT(hijack_rank0(*hijack, job),
             Catch::Contains("process " + std::to_string(::getpid()) +
                             " is not rank 0's process or one of its descendants"));
  // The refused connection speaks for nobody: its heartbeat is refused too, and the timeline
  // never records a hello.
  REQUIRE(hijack->send_line(R"({"v":2,"type":"heartbeat","step":5})").ok());
  auto second = hijack->read_line(10s);
  REQUIRE(second.ok());
  CHECK_THAT(*second, Catch::Contains("before hello"));
  CHECK(events_named(d, "hello").empty());
}

TEST_CASE("a neighbour's junk on the control socket is counted in the log, not a line each",
          "[integration]") {
  RunDirs d;
  write_config(d, "", 50);
  Background run(
      {shardguard_bin(), "run", "--config", d.config(), "--nproc", "1", "--", "sleep", "1000"},
      d.log());
  REQUIRE(eventually([&] { return !events_named(d, "launch").empty(); }, 30s));
  // 2,000 bad lines over 20 connections (each connection's own line rate is limited, so a
  // flood comes from many): every one is answered with an error and would be a log line.
  int sent = 0;
  for (int c = 0; c < 20; ++c) {
    auto client = io::UnixSocketClient::connect(supervisor::control_socket_path(d.run()));
    if (!client.ok()) continue;
    for (int i = 0; i < 100; ++i) sent += client->send_line("{\"v\":2,\"type\":\"junk\"}").ok();
    (void)client->read_line(200ms);
  }
  CHECK(sent >= 1000);
  std::this_thread::sleep_for(1500ms);  // the limiter's summary of the last window
  run.signal(SIGKILL);
  run.wait(10s);
  const std::string log = slurp(d.log());
  size_t lines = 0;
  for (size_t at = log.find("control socket:"); at != std::string::npos;
       at = log.find("control socket:", at + 1))
    ++lines;
  INFO(log.substr(0, 4000));
  CHECK(lines > 0);
  CHECK(lines <= 60);  // 10 a second per cause, and the counts
  CHECK_THAT(log, Catch::Contains("more in the last"));
}
