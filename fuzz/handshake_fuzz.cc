// libFuzzer target: the handshake parsers and both state machines get arbitrary bytes. They
// must never crash; what parses must encode back to the same bytes; and no input can
// complete a handshake, since that needs a MAC over fresh nonces under the secret.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz/net_fuzz_keys.h"
#include "net/handshake.h"

using namespace shardguard;

namespace {

std::string framed(std::string_view body) {
  std::string out;
  out.push_back(static_cast<char>(body.size() >> 8));
  out.push_back(static_cast<char>(body.size() & 0xff));
  out.append(body);
  return out;
}

template <typename Machine>
void feed_in_chunks(Machine& m, std::string_view bytes, uint8_t seed) {
  size_t chunk = seed % 64 + 1;
  for (size_t at = 0; at < bytes.size(); at += chunk) {
    auto step = m.feed(bytes.substr(at, chunk));
    if (!step.ok()) {
      if (m.done()) std::abort();
      (void)m.closed_early();
      return;
    }
    if (step->done) std::abort();  // forged a handshake
  }
  (void)m.closed_early();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t target = data[0], seed = data[1];
  const std::string_view rest(reinterpret_cast<const char*>(data) + 2, size - 2);
  switch (target % 6) {
    case 0:
      if (auto h = net::parse_hello(rest); h.ok() && net::encode_hello(*h) != framed(rest)) {
        std::abort();
      }
      break;
    case 1:
      if (auto c = net::parse_challenge(rest);
          c.ok() && net::encode_challenge(*c) != framed(rest)) {
        std::abort();
      }
      break;
    case 2:
      if (auto r = net::parse_response(rest); r.ok() && net::encode_response(*r) != framed(rest)) {
        std::abort();
      }
      break;
    case 3: {  // a server hearing anything
      net::ServerHandshake server(fuzz::fuzz_secret(), "server", fuzz::fixed_nonce(2));
      feed_in_chunks(server, rest, seed);
      break;
    }
    case 4: {  // a client that sent its hello, answered by anything
      net::ClientHandshake client(fuzz::fuzz_secret(), "client", fuzz::fixed_nonce(3));
      if (!client.start().ok()) std::abort();
      feed_in_chunks(client, rest, seed);
      break;
    }
    case 5: {  // a server after a genuine hello (nonce 1), then anything as the response
      net::ClientHandshake client(fuzz::fuzz_secret(), "client", fuzz::fixed_nonce(1));
      net::ServerHandshake server(fuzz::fuzz_secret(), "server", fuzz::fixed_nonce(4));
      auto challenge = server.feed(*client.start());
      if (!challenge.ok()) std::abort();
      feed_in_chunks(server, rest, seed);
      break;
    }
  }
  return 0;
}
