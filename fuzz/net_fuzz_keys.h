// Fixed sessions for the net/ fuzz targets: a handshake with fixed nonces and a fixed secret,
// so every run (and every seed in fuzz/corpus/) sees the same keys.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>

#include "net/handshake.h"

namespace shardguard::fuzz {

inline std::shared_ptr<const net::Secret> fuzz_secret() {
  static auto secret = std::make_shared<const net::Secret>(
      std::move(net::Secret::from_bytes(std::string(32, 'f'))).value());
  return secret;
}

inline net::Nonce fixed_nonce(uint8_t v) {
  net::Nonce n;
  n.fill(v);
  return n;
}

// The two sides of one handshake between "client" and "server" with nonces 1 and 2.
struct FuzzSessions {
  net::Session client;
  net::Session server;
};

inline const FuzzSessions& fuzz_sessions() {
  static const FuzzSessions sessions = [] {
    net::ClientHandshake c(fuzz_secret(), "client", fixed_nonce(1));
    net::ServerHandshake s(fuzz_secret(), "server", fixed_nonce(2));
    auto hello = c.start();
    auto challenge = s.feed(*hello);
    auto response = c.feed(challenge->to_send);
    auto done = s.feed(response->to_send);
    if (!done.ok() || !done->done) std::abort();
    return FuzzSessions{c.session(), s.session()};
  }();
  return sessions;
}

}  // namespace shardguard::fuzz
