// The handshake machines in memory: both ways with one secret, refusals for a wrong secret on
// either side, tampered, truncated, malformed and replayed messages.
#include "net/handshake.h"

#include <catch2/catch.hpp>

#include "tests/net/session_fixture.h"

using shardguard::ErrorCode;
using shardguard::testing::handshake_pair;
using shardguard::testing::make_secret;
using shardguard::testing::nonce_of;
using namespace shardguard::net;

namespace {

// The body of an encoded message (without its u16 length).
std::string body_of(const std::string& message) { return message.substr(2); }

// Drives a client and a server to the point where the server's challenge is in hand.
struct Started {
  explicit Started(std::shared_ptr<const Secret> client_secret,
                   std::shared_ptr<const Secret> server_secret)
      : client(std::move(client_secret), "node-1", nonce_of(1)),
        server(std::move(server_secret), "coordinator", nonce_of(2)) {
    auto h = client.start();
    REQUIRE(h.ok());
    hello = *h;
    auto c = server.feed(hello);
    REQUIRE(c.ok());
    REQUIRE_FALSE(c->done);
    challenge = c->to_send;
  }
  ClientHandshake client;
  ServerHandshake server;
  std::string hello;
  std::string challenge;
};

}  // namespace

TEST_CASE("One secret: both sides authenticate and agree on per-direction keys") {
  auto secret = make_secret('k');
  const size_t chunk = GENERATE(size_t{1}, size_t{3}, size_t{1000});
  ClientHandshake client(secret, "node-1", *random_nonce());
  ServerHandshake server(secret, "coordinator", *random_nonce());
  auto hello = client.start();
  REQUIRE(hello.ok());
  // Any chunking of the stream gives the same result.
  std::string challenge;
  for (size_t i = 0; i < hello->size(); i += chunk) {
    auto step = server.feed(hello->substr(i, chunk));
    REQUIRE(step.ok());
    challenge += step->to_send;
  }
  CHECK(server.claimed_name() == "node-1");
  std::string response;
  for (size_t i = 0; i < challenge.size(); i += chunk) {
    auto step = client.feed(challenge.substr(i, chunk));
    REQUIRE(step.ok());
    response += step->to_send;
    CHECK(step->done == (i + chunk >= challenge.size()));
  }
  REQUIRE(client.done());
  // The client's first frame may arrive in the same read as its response.
  const std::string early = "first frame bytes";
  auto last = server.feed(response + early);
  REQUIRE(last.ok());
  REQUIRE(last->done);
  CHECK(server.take_leftover() == early);

  const Session& c = client.session();
  const Session& s = server.session();
  CHECK(c.peer_name == "coordinator");
  CHECK(s.peer_name == "node-1");
  CHECK(c.send.key == s.recv.key);
  CHECK(c.recv.key == s.send.key);
  CHECK(c.send.key != c.recv.key);
  CHECK(c.send.direction == Direction::kClientToServer);
  CHECK(s.send.direction == Direction::kServerToClient);
}

TEST_CASE("Fresh nonces give every connection its own keys") {
  auto secret = make_secret('k');
  auto a = handshake_pair(secret);
  auto b = handshake_pair(secret);
  CHECK(a.client.send.key != b.client.send.key);
  CHECK(a.client.recv.key != b.client.recv.key);
  // Same nonces, same names, same secret: the same keys (the derivation is deterministic).
  auto c = handshake_pair(secret, nonce_of(7), nonce_of(8));
  auto d = handshake_pair(secret, nonce_of(7), nonce_of(8));
  CHECK(c.client.send.key == d.client.send.key);
  // Another secret, same nonces: other keys.
  auto e = handshake_pair(make_secret('z'), nonce_of(7), nonce_of(8));
  CHECK(e.client.send.key != c.client.send.key);
}

TEST_CASE("A wrong secret on either side: both refuse") {
  const bool client_wrong = GENERATE(true, false);
  auto right = make_secret('k');
  auto wrong = make_secret('w');
  Started s(client_wrong ? wrong : right, client_wrong ? right : wrong);
  // The client checks the server's proof first and refuses it.
  auto step = s.client.feed(s.challenge);
  REQUIRE_FALSE(step.ok());
  CHECK(step.error().code() == ErrorCode::kCorrupt);
  CHECK_THAT(step.error().message(), Catch::Contains("server 'coordinator' does not verify") &&
                                         Catch::Contains("different secrets"));
  CHECK_FALSE(s.client.done());
  // And it stays refused.
  CHECK_FALSE(s.client.feed("").ok());

  // The server refuses a response computed with the other secret (what a client that skipped
  // the check, or an impostor, would send).
  const Secret& client_key = client_wrong ? *wrong : *right;
  std::string names;
  names += static_cast<char>(6);
  names += "node-1";
  names += static_cast<char>(11);
  names += "coordinator";
  const Nonce nc = nonce_of(1), ns = nonce_of(2);
  auto forged = hmac_sha256(client_key.bytes(), {"sg1 client", as_chars(ns), as_chars(nc), names});
  REQUIRE(forged.ok());
  auto verdict = s.server.feed(encode_response(Response{*forged}));
  REQUIRE_FALSE(verdict.ok());
  CHECK_THAT(verdict.error().message(),
             Catch::Contains("response from client 'node-1' does not verify"));
  CHECK_FALSE(s.server.done());
}

TEST_CASE("The forged response above is exactly what the right secret accepts") {
  // Guards the test above: with the right key the same construction verifies.
  auto secret = make_secret('k');
  Started s(secret, secret);
  std::string names;
  names += static_cast<char>(6);
  names += "node-1";
  names += static_cast<char>(11);
  names += "coordinator";
  auto mac = hmac_sha256(secret->bytes(),
                         {"sg1 client", as_chars(nonce_of(2)), as_chars(nonce_of(1)), names});
  REQUIRE(mac.ok());
  auto verdict = s.server.feed(encode_response(Response{*mac}));
  REQUIRE(verdict.ok());
  CHECK(verdict->done);
}

TEST_CASE("Any flipped bit in a handshake message makes it fail") {
  auto secret = make_secret('k');
  SECTION("the challenge: the client never completes") {
    Started base(secret, secret);
    for (size_t byte = 0; byte < base.challenge.size(); ++byte) {
      for (int bit = 0; bit < 8; ++bit) {
        Started s(secret, secret);
        std::string bad = s.challenge;
        bad[byte] = static_cast<char>(bad[byte] ^ (1 << bit));
        auto step = s.client.feed(bad);
        INFO("byte " << byte << " bit " << bit);
        // Either refused, or (a longer length field) still waiting: never authenticated.
        CHECK((!step.ok() || !step->done));
        CHECK_FALSE(s.client.done());
      }
    }
  }
  SECTION("the hello: the server's challenge then fails at the client") {
    Started base(secret, secret);
    for (size_t byte = 2; byte < base.hello.size(); ++byte) {
      ClientHandshake client(secret, "node-1", nonce_of(1));
      ServerHandshake server(secret, "coordinator", nonce_of(2));
      std::string bad = *client.start();
      bad[byte] = static_cast<char>(bad[byte] ^ 0x40);
      auto challenge = server.feed(bad);
      INFO("byte " << byte);
      if (!challenge.ok()) continue;  // refused outright (type, version, name)
      auto step = client.feed(challenge->to_send);
      CHECK_FALSE(step.ok());
    }
  }
  SECTION("the response: the server never completes") {
    Started base(secret, secret);
    auto good = base.client.feed(base.challenge);
    REQUIRE(good.ok());
    const std::string response = good->to_send;
    for (size_t byte = 0; byte < response.size(); ++byte) {
      for (int bit = 0; bit < 8; ++bit) {
        Started s(secret, secret);
        std::string bad = response;
        bad[byte] = static_cast<char>(bad[byte] ^ (1 << bit));
        auto step = s.server.feed(bad);
        INFO("byte " << byte << " bit " << bit);
        CHECK((!step.ok() || !step->done));
        CHECK_FALSE(s.server.done());
      }
    }
  }
}

TEST_CASE("Truncated messages are refused by the parsers, naming what is short") {
  auto secret = make_secret('k');
  Started s(secret, secret);
  auto response = s.client.feed(s.challenge);
  REQUIRE(response.ok());
  const std::string hello = body_of(s.hello);
  const std::string challenge = body_of(s.challenge);
  const std::string resp = body_of(response->to_send);
  for (size_t n = 0; n < hello.size(); ++n) {
    auto r = parse_hello(std::string_view(hello).substr(0, n));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == ErrorCode::kCorrupt);
    CHECK_THAT(r.error().message(), Catch::StartsWith("hello: "));
  }
  for (size_t n = 0; n < challenge.size(); ++n) {
    auto r = parse_challenge(std::string_view(challenge).substr(0, n));
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message(), Catch::StartsWith("challenge: "));
  }
  for (size_t n = 0; n < resp.size(); ++n) {
    auto r = parse_response(std::string_view(resp).substr(0, n));
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message(), Catch::StartsWith("response: "));
  }
  CHECK(parse_hello(hello).ok());
  CHECK(parse_challenge(challenge).ok());
  CHECK(parse_response(resp).ok());
  CHECK_FALSE(parse_response(resp + "x").ok());
  CHECK_FALSE(parse_hello(hello + "x").ok());
}

TEST_CASE("A connection that ends mid-handshake says where it stopped") {
  auto secret = make_secret('k');
  Started s(secret, secret);
  auto partial = s.client.feed(s.challenge.substr(0, 10));
  REQUIRE(partial.ok());
  CHECK_FALSE(partial->done);
  CHECK_THAT(s.client.closed_early().message(),
             Catch::Contains("waiting for the server's challenge") &&
                 Catch::Contains("10 bytes of a message received"));
  CHECK_THAT(s.server.closed_early().message(),
             Catch::Contains("waiting for the client's response"));
  ServerHandshake fresh(secret, "coordinator", nonce_of(3));
  CHECK_THAT(fresh.closed_early().message(), Catch::Contains("waiting for the client's hello"));
}

TEST_CASE("Malformed hellos: type, version, names, lengths") {
  auto secret = make_secret('k');
  auto refused = [&](const std::string& bytes) {
    ServerHandshake server(secret, "coordinator", nonce_of(2));
    auto step = server.feed(bytes);
    REQUIRE_FALSE(step.ok());
    return step.error().message();
  };
  CHECK_THAT(refused(encode_hello(Hello{2, nonce_of(1), "node-1"})),
             Catch::Contains("protocol version 2, this build speaks 1"));
  CHECK_THAT(refused(encode_hello(Hello{1, nonce_of(1), "bad name"})),
             Catch::Contains("byte 0x20 at 3"));
  CHECK_THAT(refused(encode_hello(Hello{1, nonce_of(1), std::string("a\x01", 2)})),
             Catch::Contains("byte 0x01 at 1"));
  CHECK_THAT(refused(encode_challenge(Challenge{nonce_of(1), "x", {}})),
             Catch::Contains("message type 2, expected 1"));
  CHECK_THAT(refused(std::string("GET / HTTP/1.1\r\n\r\n")),
             Catch::Contains("more than 512") && Catch::Contains("not a shardguard peer"));
  CHECK_THAT(refused(std::string("\0\0", 2)), Catch::Contains("empty message"));
  // A client with an invalid own name refuses to start.
  ClientHandshake client(secret, "", nonce_of(1));
  CHECK_FALSE(client.start().ok());
}

TEST_CASE("A recorded client handshake replayed to the server fails (fresh server nonce)") {
  auto secret = make_secret('k');
  ClientHandshake client(secret, "node-1", nonce_of(1));
  ServerHandshake server(secret, "coordinator", nonce_of(2));
  const std::string hello = *client.start();
  auto challenge = server.feed(hello);
  REQUIRE(challenge.ok());
  auto response = client.feed(challenge->to_send);
  REQUIRE(response.ok());
  REQUIRE(server.feed(response->to_send)->done);

  ServerHandshake again(secret, "coordinator", nonce_of(9));
  auto step = again.feed(hello + response->to_send);
  REQUIRE_FALSE(step.ok());
  CHECK_THAT(step.error().message(), Catch::Contains("does not verify"));

  // Nor is a server's own proof accepted as a client's (the labels differ).
  ServerHandshake reflect(secret, "coordinator", nonce_of(2));
  auto ch = reflect.feed(hello);
  REQUIRE(ch.ok());
  auto parsed = parse_challenge(body_of(ch->to_send));
  REQUIRE(parsed.ok());
  CHECK_FALSE(reflect.feed(encode_response(Response{parsed->mac})).ok());
}
