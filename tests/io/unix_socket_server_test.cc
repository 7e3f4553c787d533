// UnixSocketServer with real sockets: the server's loop runs on its own thread while the
// test drives blocking UnixSocketClients.
#include "io/unix_socket_server.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "io/event_loop.h"
#include "tests/io/unix_echo_server.h"

using namespace std::chrono_literals;
using shardguard::ErrorCode;
using shardguard::io::ConnectionId;
using shardguard::io::EventLoop;
using shardguard::io::UnixSocketClient;
using shardguard::io::UnixSocketServer;
using shardguard::io::UnixSocketServerOptions;
using shardguard::testing::EchoServer;
using shardguard::testing::socket_path;
namespace fs = std::filesystem;


TEST_CASE("unix socket: the socket file is mode 0600 and removed at the end", "[integration]") {
  std::string path;
  {
    EchoServer server("mode");
    path = server.path();
    struct stat st {};
    REQUIRE(::lstat(path.c_str(), &st) == 0);
    CHECK(S_ISSOCK(st.st_mode));
    CHECK((st.st_mode & 07777) == 0600);
  }
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("unix socket: a line makes the round trip", "[integration]") {
  EchoServer server("echo");
  auto client = server.client();
  REQUIRE(client.send_line(R"({"type":"hello","rank":0})").ok());
  auto reply = client.read_line(5s);
  REQUIRE(reply.ok());
  CHECK(*reply == R"(echo:{"type":"hello","rank":0})");
  // Several lines in one write, and a line split across writes.
  REQUIRE(client.send_raw("a\nb\nc").ok());
  REQUIRE(client.send_raw("d\n").ok());
  for (const char* want : {"echo:a", "echo:b", "echo:cd"}) {
    auto line = client.read_line(5s);
    REQUIRE(line.ok());
    CHECK(*line == want);
  }
  CHECK(server.connects() == 1);
}

TEST_CASE("unix socket: a 10 MB line closes that connection only", "[integration]") {
  EchoServer server("long");
  auto good = server.client();
  auto bad = server.client();
  REQUIRE(server.wait([&] { return server.connects_unlocked() == 2; }));

  // The server closes after 64 KiB, so this write fails part way (EPIPE or ECONNRESET).
  (void)bad.send_raw(std::string(10 << 20, 'x') + "\n");
  auto closed = bad.read_line(5s);
  REQUIRE_FALSE(closed.ok());
  CHECK(closed.error().code() != ErrorCode::kTimeout);
  REQUIRE(server.wait([&] { return server.disconnects_unlocked() == 1; }));

  REQUIRE(good.send_line("still here").ok());
  auto reply = good.read_line(5s);
  REQUIRE(reply.ok());
  CHECK(*reply == "echo:still here");
  CHECK(server.lines() == std::vector<std::string>{"still here"});
}

TEST_CASE("unix socket: a client that leaves mid-line", "[integration]") {
  EchoServer server("partial");
  {
    auto quitter = server.client();
    REQUIRE(quitter.send_raw(R"({"type":"heartbeat","st)").ok());
  }
  REQUIRE(server.wait([&] { return server.disconnects_unlocked() == 1; }));
  CHECK(server.lines().empty());  // the partial line is dropped, not delivered
  auto next = server.client();
  REQUIRE(next.send_line("ok").ok());
  auto reply = next.read_line(5s);
  REQUIRE(reply.ok());
  CHECK(*reply == "echo:ok");
}

TEST_CASE("unix socket: 1000 clients at once are all served", "[integration]") {
  // Both ends of 1000 connections live in this process.
  rlimit limit{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
  if (limit.rlim_cur < 2200) {
    limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, 4096);
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &limit) == 0);
  }
  REQUIRE(limit.rlim_cur >= 2200);

  UnixSocketServerOptions options;
  options.max_connections = 0;  // no limit here: this is about the server keeping up
  EchoServer server("many", options);
  constexpr int kClients = 1000;
  const auto start = std::chrono::steady_clock::now();
  std::vector<UnixSocketClient> clients;
  clients.reserve(kClients);
  for (int i = 0; i < kClients; ++i) clients.push_back(server.client());
  for (int i = 0; i < kClients; ++i) REQUIRE(clients[i].send_line("c" + std::to_string(i)).ok());
  for (int i = 0; i < kClients; ++i) {
    auto reply = clients[i].read_line(10s);
    REQUIRE(reply.ok());
    REQUIRE(*reply == "echo:c" + std::to_string(i));
  }
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK(server.connects() == kClients);

  // broadcast reaches every one of them.
  REQUIRE(clients[0].send_line("broadcast").ok());
  for (auto& client : clients) {
    auto line = client.read_line(10s);
    REQUIRE(line.ok());
    REQUIRE(*line == "all");
  }
  clients.clear();
  REQUIRE(server.wait([&] { return server.disconnects_unlocked() == kClients; }, 10s));
}

TEST_CASE("unix socket: a peer with another uid is disconnected", "[integration]") {
  UnixSocketServerOptions options;
  options.allowed_uid = ::getuid() + 1;
  EchoServer server("uid", options);
  auto client = server.client();  // the kernel accepts; the server then checks the uid
  (void)client.send_line("hello");
  auto reply = client.read_line(5s);
  REQUIRE_FALSE(reply.ok());
  CHECK_THAT(reply.error().message(),
             Catch::Contains("connection closed") || Catch::Contains("reset"));
  CHECK(server.connects() == 0);
  CHECK(server.lines().empty());
}

TEST_CASE("unix socket: what is already at the path", "[integration]") {
  EventLoop loop;
  UnixSocketServerOptions options;
  options.path = socket_path("existing");

  SECTION("a stale socket file is replaced") {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, options.path.c_str());
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    ::close(fd);  // the file stays, nobody listens
    UnixSocketServer server(loop, options);
    CHECK(server.start().ok());
  }
  SECTION("a live server is not taken over") {
    UnixSocketServer first(loop, options);
    REQUIRE(first.start().ok());
    UnixSocketServer second(loop, options);
    auto status = second.start();
    REQUIRE_FALSE(status.ok());
    CHECK_THAT(status.error().message(), Catch::Contains(options.path));
  }
  SECTION("a regular file is left alone") {
    { std::ofstream(options.path) << "precious"; }
    UnixSocketServer server(loop, options);
    auto status = server.start();
    REQUIRE_FALSE(status.ok());
    CHECK(status.error().code() == ErrorCode::kInvalid);
    fs::remove(options.path);
  }
  SECTION("a path too long for sun_path") {
    options.path = "/tmp/" + std::string(200, 'p');
    UnixSocketServer server(loop, options);
    CHECK(server.start().error().code() == ErrorCode::kInvalid);
  }
}

TEST_CASE("unix socket: send checks its arguments", "[integration]") {
  EventLoop loop;
  UnixSocketServerOptions options;
  options.path = socket_path("send");
  UnixSocketServer server(loop, options);
  REQUIRE(server.start().ok());
  CHECK(server.send(42, "x").error().code() == ErrorCode::kNotFound);
  CHECK(server.send(42, "a\nb").error().code() == ErrorCode::kInvalid);
  CHECK(server.broadcast("nobody") == 0);
}
