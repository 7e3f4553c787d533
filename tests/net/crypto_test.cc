// The libcrypto wrappers against published test vectors (RFC 4231, RFC 5869), and the
// reusable HMAC context against the one-shot form.
#include "net/crypto.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>

using namespace shardguard::net;

namespace {

std::string hex(std::span<const uint8_t> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

std::span<const uint8_t> span_of(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

TEST_CASE("HMAC-SHA256 matches RFC 4231 test case 2, split or whole") {
  const std::string key = "Jefe";
  const std::string want = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
  auto whole = hmac_sha256(span_of(key), {"what do ya want for nothing?"});
  REQUIRE(whole.ok());
  CHECK(hex(*whole) == want);
  auto split = hmac_sha256(span_of(key), {"what do ya ", "", "want for nothing?"});
  REQUIRE(split.ok());
  CHECK(hex(*split) == want);
}

TEST_CASE("A reused HMAC context gives the one-shot result every time") {
  const std::string key(32, 'k');
  auto ctx = HmacSha256::create(span_of(key));
  REQUIRE(ctx.ok());
  for (int i = 0; i < 5; ++i) {
    const std::string msg = "message " + std::to_string(i);
    auto reused = ctx->compute({msg});
    auto fresh = hmac_sha256(span_of(key), {msg});
    REQUIRE(reused.ok());
    REQUIRE(fresh.ok());
    CHECK(hex(*reused) == hex(*fresh));
  }
}

TEST_CASE("HKDF-SHA256 matches RFC 5869 test case 1 (first 32 bytes)") {
  const std::string ikm(22, '\x0b');
  std::string salt;
  for (int i = 0; i <= 0x0c; ++i) salt.push_back(static_cast<char>(i));
  std::string info;
  for (int i = 0xf0; i <= 0xf9; ++i) info.push_back(static_cast<char>(i));
  auto okm = hkdf_sha256(span_of(ikm), salt, info);
  REQUIRE(okm.ok());
  CHECK(hex(*okm) == "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf");
}

TEST_CASE("Nonces are fresh and the comparison is exact") {
  std::set<std::string> seen;
  for (int i = 0; i < 16; ++i) {
    auto n = random_nonce();
    REQUIRE(n.ok());
    seen.insert(hex(*n));
  }
  CHECK(seen.size() == 16);
  Mac a{};
  Mac b{};
  CHECK(equal_constant_time(a.data(), b.data(), a.size()));
  b[31] = 1;
  CHECK_FALSE(equal_constant_time(a.data(), b.data(), a.size()));
}
