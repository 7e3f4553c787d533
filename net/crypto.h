// Thin wrappers over OpenSSL's libcrypto for the network plane: HMAC-SHA256, HKDF-SHA256,
// the CSPRNG and a constant-time comparison. No cryptography is implemented here; these only
// turn libcrypto's C API into values and Results, and keep OpenSSL headers out of net/*.h.
//
// Thread-safety: the free functions are thread-safe. An HmacSha256 object holds a keyed
// context and belongs to one thread at a time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "core/result.h"

struct evp_mac_ctx_st;  // OpenSSL's EVP_MAC_CTX

namespace shardguard::net {

inline constexpr size_t kMacBytes = 32;    // HMAC-SHA256 output
inline constexpr size_t kNonceBytes = 32;  // handshake nonces
inline constexpr size_t kKeyBytes = 32;    // derived session keys

using Mac = std::array<uint8_t, kMacBytes>;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Key = std::array<uint8_t, kKeyBytes>;

// Fills `out` from OpenSSL's CSPRNG (RAND_bytes). kInternal if it cannot (no entropy).
Status random_bytes(std::span<uint8_t> out);
// A fresh 32-byte nonce from random_bytes().
Result<Nonce> random_nonce();
// `bytes` bytes from random_bytes() as lower-case hex (an unguessable token).
Result<std::string> random_hex(size_t bytes);

// HKDF-SHA256 (RFC 5869) of `ikm` with `salt` and `info`, 32 bytes of output.
Result<Key> hkdf_sha256(std::span<const uint8_t> ikm, std::string_view salt, std::string_view info);

// True when the first `n` bytes of `a` and `b` are equal, in time independent of where they
// differ (CRYPTO_memcmp): MACs are compared with this, never with memcmp or ==.
bool equal_constant_time(const uint8_t* a, const uint8_t* b, size_t n);

// Overwrites `n` bytes at `p` in a way the compiler cannot drop (OPENSSL_cleanse).
void wipe(void* p, size_t n);

inline std::string_view as_chars(std::span<const uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// An HMAC-SHA256 context keyed once and reused for many messages (one per frame), so the
// key schedule is not redone per message. Move-only.
class HmacSha256 {
 public:
  // kInternal if libcrypto cannot set up the MAC (never expected on a sane system).
  static Result<HmacSha256> create(std::span<const uint8_t> key);
  HmacSha256(HmacSha256&& other) noexcept;
  HmacSha256& operator=(HmacSha256&& other) noexcept;
  HmacSha256(const HmacSha256&) = delete;
  HmacSha256& operator=(const HmacSha256&) = delete;
  ~HmacSha256();

  // The MAC of the concatenation of `parts` (no separators: callers length-prefix fields).
  Result<Mac> compute(std::initializer_list<std::string_view> parts);

 private:
  explicit HmacSha256(evp_mac_ctx_st* ctx) : ctx_(ctx) {}
  evp_mac_ctx_st* ctx_ = nullptr;
};

// One-shot HMAC-SHA256 of the concatenation of `parts` under `key`.
Result<Mac> hmac_sha256(std::span<const uint8_t> key,
                        std::initializer_list<std::string_view> parts);

}  // namespace shardguard::net
