// SecureChannel on loopback with real sockets: connect and exchange both ways (IPv4, IPv6, a
// host name), a wrong secret on either side, close, connect retries, caps and a peer that
// does not read.
#include "io/secure_channel.h"

#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "tests/io/secure_fixture.h"

using namespace shardguard;
using namespace shardguard::testing;

TEST_CASE("Connect and exchange frames both ways, on IPv4, IPv6 and a host name") {
  auto [listen_on, target] = GENERATE(table<std::string, std::string>(
      {{"127.0.0.1", "127.0.0.1"}, {"::1", "::1"}, {"127.0.0.1", "localhost"}}));
  auto secret = secret_of('k');
  Host server("coordinator", secret);
  Host client("node-1", secret);
  server.on_message = [&](ConnectionId id, size_t n) {
    // Answer from the loop thread, as a coordinator would.
    REQUIRE(server.channel().send(id, "pong " + std::to_string(n - 1)).ok());
  };
  const uint16_t port = server.listen(listen_on);
  const ConnectionId id = client.connect(port, target);
  REQUIRE(client.wait_connected());
  REQUIRE(server.wait_connected());
  CHECK(client.connected().at(id) == "coordinator");
  const ConnectionId at_server = server.first_connected();
  CHECK(server.connected().at(at_server) == "node-1");
  std::optional<std::string> address;
  server.call([&] { address = server.channel().peer_address(at_server); });
  REQUIRE(address);
  CHECK_THAT(*address, Catch::StartsWith(listen_on == "::1" ? "[::1]:" : "127.0.0.1:"));

  constexpr size_t kCount = 200;
  for (size_t i = 0; i < kCount; ++i) REQUIRE(client.send(id, "ping " + std::to_string(i)).ok());
  REQUIRE(client.wait_messages(id, kCount));
  REQUIRE(server.wait_messages(at_server, kCount));
  const auto pings = server.messages(at_server);
  const auto pongs = client.messages(id);
  for (size_t i = 0; i < kCount; ++i) {
    CHECK(pings[i] == "ping " + std::to_string(i));
    CHECK(pongs[i] == "pong " + std::to_string(i));
  }
  // The largest frame allowed goes through too, and one byte more is refused at the sender.
  const std::string big(net::kDefaultMaxPayload, 'x');
  REQUIRE(client.send(id, big).ok());
  REQUIRE(server.wait_messages(at_server, kCount + 1));
  CHECK(server.messages(at_server).back() == big);
  auto too_big = client.send(id, big + "y");
  REQUIRE_FALSE(too_big.ok());
  CHECK(too_big.error().code() == ErrorCode::kInvalid);
  CHECK(server.stats().rejected_frames == 0);
  CHECK(server.closed().empty());
  CHECK(client.closed().empty());
}

TEST_CASE("A wrong secret on either side: both refuse, nothing is delivered, it is logged") {
  LogCapture log;
  const bool client_wrong = GENERATE(true, false);
  Host server("coordinator", client_wrong ? secret_of('k') : secret_of('w'));
  Host client("node-1", client_wrong ? secret_of('w') : secret_of('k'));
  const uint16_t port = server.listen();
  io::ConnectOptions o;
  o.attempts = 5;  // a refusal must not be retried
  const ConnectionId id = client.connect(port, "127.0.0.1", o);
  REQUIRE(client.wait_closed(id));
  CHECK_THAT(client.closed_reason(id),
             Catch::Contains("does not verify") && Catch::Contains("different secrets"));
  CHECK(client.send(id, "anything").error().code() == ErrorCode::kNotFound);
  REQUIRE(eventually([&] { return server.stats().handshake_failures == 1; }, 5000ms));
  CHECK(server.stats().accepted == 1);  // not retried
  CHECK(server.connected().empty());
  CHECK(client.connected().empty());
  CHECK(server.total_messages() == 0);
  CHECK(server.closed().empty());  // never authenticated: no on_closed owed
  CHECK(log.count("secure channel 'node-1'") >= 1);
  CHECK(log.count("handshake failed") >= 2);  // both sides logged it
}

TEST_CASE("close() flushes what is queued; the peer sees it closed") {
  auto secret = secret_of('k');
  Host server("coordinator", secret);
  Host client("node-1", secret);
  const ConnectionId id = client.connect(server.listen());
  REQUIRE(server.wait_connected());
  REQUIRE(client.wait_connected());
  const ConnectionId at_server = server.first_connected();
  server.call([&] {
    REQUIRE(server.channel().send(at_server, "last words").ok());
    server.channel().close(at_server);
    // Gone at once for the caller.
    CHECK(server.channel().send(at_server, "more").error().code() == ErrorCode::kNotFound);
  });
  REQUIRE(client.wait_closed(id));
  CHECK(client.messages(id) == std::vector<std::string>{"last words"});
  CHECK(client.closed_reason(id) == "connection closed by the peer");
  REQUIRE(server.wait_closed(at_server));
  CHECK(server.closed_reason(at_server) == "closed by this side");
}

TEST_CASE("connect retries with backoff until the server is up, and gives up when told") {
  auto secret = secret_of('k');
  Host client("node-1", secret);
  SECTION("the server comes up during the retries") {
    const uint16_t port = free_port();
    io::ConnectOptions o;
    o.attempts = 50;
    o.backoff_initial = 20ms;
    o.backoff_max = 50ms;
    const ConnectionId id = client.connect(port, "127.0.0.1", o);
    std::this_thread::sleep_for(150ms);  // a few refused tries
    CHECK(client.connected().empty());
    Host server("coordinator", secret);
    server.call([&] { REQUIRE(server.channel().listen("127.0.0.1", port).ok()); });
    REQUIRE(client.wait_connected(1, 5s));
    CHECK(client.connected().count(id) == 1);
    CHECK(client.closed().empty());
  }
  SECTION("nothing ever listens") {
    io::ConnectOptions o;
    o.attempts = 3;
    o.backoff_initial = 10ms;
    const ConnectionId id = client.connect(free_port(), "127.0.0.1", o);
    REQUIRE(client.wait_closed(id, 5s));
    CHECK_THAT(client.closed_reason(id),
               Catch::Contains("refused") && Catch::Contains("gave up after 3 attempts"));
  }
  SECTION("a name that does not resolve") {
    io::ConnectOptions o;
    o.attempts = 1;
    const ConnectionId id = client.connect(1, "no-such-host.invalid", o);
    REQUIRE(client.wait_closed(id, 10s));
    CHECK_THAT(client.closed_reason(id), Catch::Contains("resolve 'no-such-host.invalid'"));
  }
}

TEST_CASE("Connection caps: unauthenticated and total; refusals are logged") {
  LogCapture log;
  auto secret = secret_of('k');
  Host server("coordinator", secret, [](io::SecureChannelOptions& o) {
    o.max_unauthenticated = 2;
    o.max_connections = 3;
  });
  const uint16_t port = server.listen();
  {
    // Two silent connections fill the unauthenticated slots; a third takes the oldest's.
    RawPeer idle1(port), idle2(port);
    REQUIRE(eventually([&] { return server.stats().accepted == 2; }, 5000ms));
    RawPeer third(port);
    CHECK(idle1.closed_by_server(2000ms));
    CHECK(server.stats().evicted_unauthenticated == 1);
    CHECK(server.stats().refused_over_cap == 0);
    CHECK(log.count("closed unauthenticated for a newer connection: 2 in the handshake") == 1);
  }
  size_t open = 99;
  REQUIRE(eventually(
      [&] {
        server.call([&] { open = server.channel().connection_count(); });
        return open == 0;
      },
      5000ms));

  // Authenticated connections count against the total only: three fit, the fourth is refused.
  Host client("node-1", secret);
  for (size_t i = 1; i <= 3; ++i) {  // one at a time: two handshakes at once would hit the cap
    client.connect(port);
    REQUIRE(server.wait_connected(i));
  }
  io::ConnectOptions once;
  once.attempts = 1;
  const ConnectionId fourth = client.connect(port, "127.0.0.1", once);
  REQUIRE(client.wait_closed(fourth));
  // Refused with a reset: the client sees it in connect or in the handshake, by timing.
  CHECK_THAT(client.closed_reason(fourth),
             Catch::Contains("closed during the handshake") || Catch::Contains("reset by peer"));
  CHECK(server.stats().refused_over_cap == 1);
  CHECK(server.connected().size() == 3);
  CHECK(server.closed().empty());
}

TEST_CASE(
    "A flood of connections that never authenticate does not keep a node that holds the "
    "secret out: the oldest handshake slot goes to the newest connection") {
  auto secret = secret_of('k');
  Host server("coordinator", secret, [](io::SecureChannelOptions& o) {
    o.max_unauthenticated = 8;
    o.max_unauthenticated_per_source = 4;
  });
  const uint16_t port = server.listen();
  // Every slot held by silent connections (they would stay for the 5 s handshake timeout).
  std::vector<std::unique_ptr<RawPeer>> flood;
  for (int i = 0; i < 8; ++i) flood.push_back(std::make_unique<RawPeer>(port));
  REQUIRE(eventually([&] { return server.stats().accepted == 8; }, 5000ms));
  // The real node connects while the flood goes on: it gets a slot and authenticates well
  // within the handshake timeout (first come, first served refused it until one expired).
  Host client("node-1", secret);
  const auto t0 = std::chrono::steady_clock::now();
  client.connect(port);
  for (int i = 0; i < 8; ++i) flood.push_back(std::make_unique<RawPeer>(port));
  REQUIRE(client.wait_connected(1, 3000ms));
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  CHECK(server.stats().evicted_unauthenticated >= 4);  // per source: 4 of the 8 slots
  CHECK(server.stats().refused_over_cap == 0);
}

TEST_CASE("A peer that does not read is dropped once 1 MiB is queued for it") {
  LogCapture log;
  auto secret = secret_of('k');
  Host server("coordinator", secret);
  const uint16_t port = server.listen();
  RawPeer peer(port);
  peer.handshake(secret, "slow-node");  // then never reads again
  REQUIRE(server.wait_connected());
  const ConnectionId id = server.first_connected();
  // All sends in one loop turn, so no write can drain the queue in between.
  Status last;
  int sent = 0;
  server.call([&] {
    const std::string chunk(64 * 1024, 'q');
    for (; sent < 64; ++sent) {
      last = server.channel().send(id, chunk);
      if (!last.ok()) break;
    }
  });
  REQUIRE_FALSE(last.ok());
  CHECK(last.error().code() == ErrorCode::kIo);
  CHECK(sent == 15);  // 15 frames of 64 KiB + 44 bytes fit under 1 MiB; the 16th does not
  REQUIRE(server.wait_closed(id));
  CHECK_THAT(server.closed_reason(id), Catch::Contains("peer is not reading"));
  CHECK(server.stats().queue_overflows == 1);
  CHECK(log.count("peer is not reading") == 1);
}
