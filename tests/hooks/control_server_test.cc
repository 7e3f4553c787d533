// Hostile input to a real ControlServer on a loopback Unix socket: garbage, over-long
// lines, half messages, strictness errors, messages before hello, 1000 ranks at once, the
// socket's mode and a peer of another uid.
#include "hooks/control_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "tests/hooks/control_fixture.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::hooks;
using shardguard::io::UnixSocketClient;
using shardguard::testing::ControlFixture;

namespace {

std::string line_of(const JobMessage& m) {
  std::string s = encode(m);
  s.pop_back();
  return s;
}

UnixSocketClient connect_to(const ControlFixture& f) {
  auto c = UnixSocketClient::connect(f.path());
  REQUIRE(c.ok());
  return std::move(c).value();
}

// The next line from the server, decoded.
AgentMessage next_message(UnixSocketClient& c) {
  auto line = c.read_line(10s);
  if (!line.ok()) FAIL(line.error().message());
  auto m = decode_agent_message(*line);
  if (!m.ok()) FAIL(m.error().message() << " in " << *line);
  return *m;
}

std::string next_error(UnixSocketClient& c) {
  auto m = next_message(c);
  REQUIRE(std::holds_alternative<ErrorReply>(m));
  return std::get<ErrorReply>(m).message;
}

void say_hello(UnixSocketClient& c, uint32_t rank, uint32_t world = 1) {
  REQUIRE(c.send_line(line_of(Hello{rank, world, 1000 + rank, "job", 0})).ok());
}

}  // namespace

TEST_CASE("control server: garbage gets an error reply and the connection stays usable",
          "[integration]") {
  ControlFixture f(Schedule{50, 0});
  REQUIRE(f.start_status().ok());
  auto c = connect_to(f);
  static const char kGarbage[] = "\x00\xff\x7f garbage {{{\n";
  REQUIRE(c.send_raw(std::string(kGarbage, sizeof kGarbage - 1)).ok());
  CHECK_THAT(next_error(c), Catch::Contains("not JSON"));
  say_hello(c, 0);
  auto m = next_message(c);
  REQUIRE(std::holds_alternative<Schedule>(m));
  CHECK(std::get<Schedule>(m).every_steps == 50);
  CHECK(
      f.wait([](const auto& r) { return r.hellos.size() == 1 && r.protocol_errors.size() == 1; }));
}

TEST_CASE("control server: strictness errors are answered, naming the problem", "[integration]") {
  const auto [line, problem] = GENERATE(table<std::string, std::string>({
      {R"({"v":2,"type":"reboot"})", "unknown message type 'reboot'"},
      {R"({"v":2,"type":"heartbeat","step":3,"color":"red"})", "unknown field 'color'"},
      {R"({"v":2,"type":"heartbeat","step":"three"})", "field 'step' must be"},
      {R"({"v":2,"type":"checkpoint_committed","step":3})", "missing field 'manifest'"},
      {R"({"v":9,"type":"heartbeat","step":3})", "version 9"},
  }));
  ControlFixture f;
  auto c = connect_to(f);
  say_hello(c, 0);
  REQUIRE(std::holds_alternative<Schedule>(next_message(c)));
  REQUIRE(c.send_line(line).ok());
  CHECK_THAT(next_error(c), Catch::Contains(problem));
  // Still served: a heartbeat after the error is seen.
  REQUIRE(c.send_line(line_of(Heartbeat{4, {}})).ok());
  CHECK(f.wait(
      [](const auto& r) { return r.heartbeats.size() == 1 && r.heartbeats[0].second == 4; }));
}

TEST_CASE("control server: a message before hello is refused", "[integration]") {
  ControlFixture f;
  auto c = connect_to(f);
  REQUIRE(c.send_line(line_of(Heartbeat{9, {}})).ok());
  CHECK_THAT(next_error(c), Catch::Contains("heartbeat before hello"));
  REQUIRE(c.send_line(line_of(CheckpointCommitted{9, "m"})).ok());
  CHECK_THAT(next_error(c), Catch::Contains("checkpoint_committed before hello"));
  auto r = f.record();
  CHECK(r.heartbeats.empty());
  CHECK(r.committed.empty());
}

TEST_CASE("control server: a 10 MB line closes that connection only", "[integration]") {
  ControlFixture f;
  auto good = connect_to(f);
  auto bad = connect_to(f);
  say_hello(good, 0, 2);
  REQUIRE(std::holds_alternative<Schedule>(next_message(good)));
  (void)bad.send_raw(std::string(10 << 20, '{') + "\n");  // fails part way once closed
  auto closed = bad.read_line(10s);
  REQUIRE_FALSE(closed.ok());
  CHECK(closed.error().code() != ErrorCode::kTimeout);
  REQUIRE(good.send_line(line_of(Heartbeat{11, {}})).ok());
  CHECK(f.wait([](const auto& r) { return r.heartbeats.size() == 1; }));
  auto other = connect_to(f);  // and new ranks are still accepted
  say_hello(other, 1, 2);
  CHECK(std::holds_alternative<Schedule>(next_message(other)));
}

TEST_CASE("control server: half a message then a disconnect", "[integration]") {
  ControlFixture f;
  {
    auto quitter = connect_to(f);
    say_hello(quitter, 0);
    REQUIRE(std::holds_alternative<Schedule>(next_message(quitter)));
    REQUIRE(quitter.send_raw(R"({"v":2,"type":"heartbeat","st)").ok());
  }
  REQUIRE(f.wait([](const auto& r) { return r.disconnects.size() == 1; }));
  auto r = f.record();
  CHECK(r.heartbeats.empty());  // the partial line is dropped, not parsed
  CHECK(r.protocol_errors.empty());
  auto next = connect_to(f);
  say_hello(next, 0);
  CHECK(std::holds_alternative<Schedule>(next_message(next)));
}

TEST_CASE("control server: 1000 ranks connecting at once all get their schedule", "[integration]") {
  rlimit limit{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
  if (limit.rlim_cur < 2200) {
    limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, 4096);
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &limit) == 0);
  }
  ControlFixture f(Schedule{25, 0});
  constexpr uint32_t kRanks = 1000;
  std::vector<UnixSocketClient> clients;
  clients.reserve(kRanks);
  for (uint32_t i = 0; i < kRanks; ++i) clients.push_back(connect_to(f));
  for (uint32_t i = 0; i < kRanks; ++i) say_hello(clients[i], i, kRanks);
  for (auto& c : clients) {
    auto m = next_message(c);
    REQUIRE(std::holds_alternative<Schedule>(m));
    REQUIRE(std::get<Schedule>(m).every_steps == 25);
  }
  CHECK(f.wait([](const auto& r) { return r.hellos.size() == kRanks; }));
  CHECK(f.send_all(Stop{123}) == kRanks);
  for (auto& c : clients) REQUIRE(std::holds_alternative<Stop>(next_message(c)));
}

TEST_CASE("control server: the socket is mode 0600", "[integration]") {
  ControlFixture f;
  struct stat st {};
  REQUIRE(::stat(f.path().c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 0777) == 0600);
}

namespace {

// In a forked child running as `uid`: connect and say hello with raw syscalls. Exit codes:
// 10 connect refused, 11 closed or no reply, 12 got a reply, 13 setup failed.
[[noreturn]] void hello_as(uid_t uid, const std::string& path, const std::string& hello) {
  if (::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(13);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) ::_exit(10);
  // The server may have closed already: no SIGPIPE, a failed send means refused.
  if (::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) < 0) ::_exit(11);
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 2000) <= 0) ::_exit(11);
  char buf[256];
  ::_exit(::read(fd, buf, sizeof buf) > 0 ? 12 : 11);
}

int child_exit_code(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

}  // namespace

TEST_CASE("control server: a client of another uid is refused", "[integration]") {
  if (::geteuid() != 0) {
    WARN("SKIP: needs root to run a client as another uid");
    return;
  }
  ControlFixture f;
  REQUIRE(::chmod(f.dir().c_str(), 0755) == 0);  // so only the socket's own mode decides
  const std::string hello = encode(JobMessage(Hello{0, 1, 1, "job", 0}));
  SECTION("the socket's mode keeps it out") {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) hello_as(65534, f.path(), hello);
    CHECK(child_exit_code(pid) == 10);
  }
  SECTION("the peer uid check closes it even when the mode would let it in") {
    REQUIRE(::chmod(f.path().c_str(), 0666) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) hello_as(65534, f.path(), hello);
    CHECK(child_exit_code(pid) == 11);
  }
  CHECK(f.record().hellos.empty());
}
