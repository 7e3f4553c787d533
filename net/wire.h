// Big-endian integer encoding for net/'s wire formats (handshake messages and frames).
// Internal to net/. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace shardguard::net::wire {

inline void put_u8(std::string& out, uint8_t v) { out.push_back(static_cast<char>(v)); }

inline void put_u16(std::string& out, uint16_t v) {
  put_u8(out, static_cast<uint8_t>(v >> 8));
  put_u8(out, static_cast<uint8_t>(v));
}

inline void put_u32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) put_u8(out, static_cast<uint8_t>(v >> shift));
}

inline void put_u64(std::string& out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) put_u8(out, static_cast<uint8_t>(v >> shift));
}

// Reads `n` bytes at `p` (the caller checked they exist) as a big-endian number.
inline uint64_t get_be(std::string_view bytes, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | static_cast<uint8_t>(bytes[at + i]);
  return v;
}

inline std::string u64_be(uint64_t v) {
  std::string s;
  s.reserve(8);
  put_u64(s, v);
  return s;
}

inline std::string u32_be(uint32_t v) {
  std::string s;
  s.reserve(4);
  put_u32(s, v);
  return s;
}

}  // namespace shardguard::net::wire
