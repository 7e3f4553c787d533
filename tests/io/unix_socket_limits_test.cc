// UnixSocketServer limits with real sockets (issue 11): connection count, line rate,
// output queued for a peer that does not read, junk floods; and the peer's SO_PEERCRED.
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <thread>

#include "io/unix_socket_server.h"
#include "tests/io/unix_echo_server.h"

using namespace std::chrono_literals;
using shardguard::ErrorCode;
using shardguard::FakeClock;
using shardguard::io::ConnectionId;
using shardguard::io::PeerCredentials;
using shardguard::io::UnixSocketClient;
using shardguard::io::UnixSocketServerOptions;
using shardguard::testing::EchoServer;

namespace {

// True once the server has closed the client's connection (EOF or reset, not a timeout).
bool closed_by_server(UnixSocketClient& client) {
  for (int i = 0; i < 100; ++i) {
    auto line = client.read_line(5s);
    if (!line.ok()) return line.error().code() != ErrorCode::kTimeout;
  }
  return false;
}

bool echoes(UnixSocketClient& client, const std::string& word) {
  if (!client.send_line(word).ok()) return false;
  auto reply = client.read_line(5s);
  return reply.ok() && *reply == "echo:" + word;
}

std::string lines_of(const std::string& word, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += word + "\n";
  return out;
}

long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string key;
  long value = 0;
  while (in >> key) {
    if (key == "VmRSS:") {
      in >> value;
      return value;
    }
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

}  // namespace

TEST_CASE("unix socket limits: connections beyond max_connections are closed and counted",
          "[integration]") {
  UnixSocketServerOptions options;
  options.max_connections = 3;
  EchoServer server("maxconn", options);
  std::vector<UnixSocketClient> admitted;
  for (int i = 0; i < 3; ++i) admitted.push_back(server.client());
  REQUIRE(server.wait([&] { return server.connects_unlocked() == 3; }));
  for (int i = 0; i < 2; ++i) {
    auto extra = server.client();  // the kernel accepts; the server closes it at once
    CHECK(closed_by_server(extra));
  }
  CHECK(server.stats().refused_too_many == 2);
  CHECK(server.connects() == 3);
  for (auto& c : admitted) CHECK(echoes(c, "still served"));

  admitted.pop_back();  // a slot frees up
  REQUIRE(server.wait([&] { return server.disconnects_unlocked() == 1; }));
  auto next = server.client();
  CHECK(echoes(next, "admitted again"));
  CHECK(server.stats().accepted == 4);
}

TEST_CASE("unix socket limits: the peer's pid, uid and gid reach on_accept and on_line",
          "[integration]") {
  std::mutex mu;
  std::vector<PeerCredentials> accepted;
  UnixSocketServerOptions options;
  options.on_accept = [&](ConnectionId, const PeerCredentials& peer) {
    std::lock_guard lock(mu);
    accepted.push_back(peer);
    return accepted.size() != 2;  // the policy refuses the second peer
  };
  EchoServer server("peercred", options);
  const PeerCredentials self{::getpid(), ::getuid(), ::getgid()};

  auto first = server.client();
  CHECK(echoes(first, "me"));
  auto refused = server.client();
  CHECK(closed_by_server(refused));
  CHECK(server.stats().refused_by_policy == 1);
  CHECK(server.connects() == 1);  // no on_connect for the refused one

  // Another process: its own pid, seen by the kernel, not claimed by the peer.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, server.path().c_str());
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // only system calls until _exit: the parent has threads
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) ::_exit(1);
    const char line[] = "from the child\n";
    if (::write(fd, line, sizeof line - 1) != static_cast<ssize_t>(sizeof line - 1)) ::_exit(2);
    char byte;
    (void)::read(fd, &byte, 1);  // the echo: the line has been seen
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);

  const auto peers = server.line_peers();
  REQUIRE(peers.size() == 2);
  CHECK(peers[0] == self);
  CHECK(peers[1] == PeerCredentials{child, ::getuid(), ::getgid()});
  std::lock_guard lock(mu);
  REQUIRE(accepted.size() == 3);
  CHECK(accepted[0] == self);
  CHECK(accepted[2].pid == child);
}

TEST_CASE("unix socket limits: more than 1,000 lines per second closes the connection",
          "[integration]") {
  FakeClock clock;  // time moves only when the test says so
  UnixSocketServerOptions options;
  options.clock = &clock;
  REQUIRE(options.max_lines_per_second == 1000);  // the default the supervisor relies on
  EchoServer server("rate", options);
  auto polite = server.client();
  auto flooder = server.client();
  REQUIRE(server.wait([&] { return server.connects_unlocked() == 2; }));

  // A full second's worth at once is allowed; a second later the bucket is full again.
  REQUIRE(polite.send_raw(lines_of("quiet", 1000)).ok());
  REQUIRE(server.wait([&] { return server.lines_unlocked() == 1000; }));
  clock.advance(1s);
  CHECK(echoes(polite, "after a second"));

  // One line more than the bucket holds.
  (void)flooder.send_raw(lines_of("quiet", 1001));
  CHECK(closed_by_server(flooder));
  const auto stats = server.stats();
  CHECK(stats.closed_line_rate == 1);
  CHECK(server.lines().size() == 1000 + 1 + 1000);  // the 1,001st never reached on_line
  clock.advance(1s);
  CHECK(echoes(polite, "unaffected"));
}

TEST_CASE("unix socket limits: a peer that does not read is dropped after 1 MiB queued",
          "[integration]") {
  EchoServer server("noread");
  auto sleeper = server.client();  // never reads
  REQUIRE(server.wait([&] { return server.connects_unlocked() == 1; }));
  const std::string line(64 * 1024, 'x');
  int queued = 0;
  for (int i = 0; i < 200 && server.broadcast(line) == 1; ++i) ++queued;
  // 1 MiB in our queue plus what the kernel's socket buffer took; never the whole 12.5 MiB.
  CHECK(queued >= 16);
  CHECK(queued < 64);
  CHECK(server.stats().closed_not_reading == 1);
  REQUIRE(server.wait([&] { return server.disconnects_unlocked() == 1; }));
}

TEST_CASE("unix socket limits: 40 clients flooding junk cost bounded memory", "[integration]") {
  EchoServer server("junk");
  const long before = rss_kib();
  constexpr int kClients = 40;
  std::vector<std::thread> threads;
  std::atomic<int> dropped{0};
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto c = UnixSocketClient::connect(server.path());
      if (!c.ok()) return;
      // Half send one endless line, half short lines as fast as they can; none reads.
      const std::string chunk = i % 2 ? std::string(64 * 1024, 'j') : lines_of("junk", 8000);
      for (int k = 0; k < 16 && c->send_raw(chunk).ok(); ++k) {
      }
      if (closed_by_server(*c)) ++dropped;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(dropped == kClients);
  const auto stats = server.stats();
  CHECK(stats.closed_line_too_long == kClients / 2);
  CHECK(stats.closed_line_rate == kClients / 2);
  // Issue 11 measured 935 MB of RSS for 17.6 MB of junk; here each peer costs at most a line.
  CHECK(rss_kib() - before < 64 * 1024);
  REQUIRE(server.wait([&] { return server.disconnects_unlocked() == kClients; }));
}
