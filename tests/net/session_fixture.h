// Test helpers: secrets, and a complete in-memory handshake that yields both sides' sessions.
#pragma once

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "net/handshake.h"
#include "net/secret.h"

namespace shardguard::testing {

inline std::shared_ptr<const net::Secret> make_secret(char fill, size_t n = 32) {
  auto s = net::Secret::from_bytes(std::string(n, fill));
  REQUIRE(s.ok());
  return std::make_shared<const net::Secret>(std::move(s).value());
}

inline net::Nonce nonce_of(uint8_t fill) {
  net::Nonce n;
  n.fill(fill);
  return n;
}

struct SessionPair {
  net::Session client;
  net::Session server;
};

// Runs hello -> challenge -> response between two in-memory machines.
inline SessionPair handshake_pair(std::shared_ptr<const net::Secret> secret,
                                  net::Nonce nc = *net::random_nonce(),
                                  net::Nonce ns = *net::random_nonce()) {
  net::ClientHandshake client(secret, "node-1", nc);
  net::ServerHandshake server(secret, "coordinator", ns);
  auto hello = client.start();
  REQUIRE(hello.ok());
  auto challenge = server.feed(*hello);
  REQUIRE(challenge.ok());
  auto response = client.feed(challenge->to_send);
  REQUIRE(response.ok());
  REQUIRE(response->done);
  auto last = server.feed(response->to_send);
  REQUIRE(last.ok());
  REQUIRE(last->done);
  return {client.session(), server.session()};
}

}  // namespace shardguard::testing
