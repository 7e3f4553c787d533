// Hex digests and base64 for the JSON records.
#include <array>
#include <cstdio>

#include "checkpoint/manifest.h"

namespace shardguard::checkpoint {
namespace {
constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string xxh3_128_hex(uint64_t high, uint64_t low) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(high),
                static_cast<unsigned long long>(low));
  return buf;
}

std::string u64_hex(uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

std::optional<uint64_t> parse_u64_hex(std::string_view text) {
  if (text.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else
      return std::nullopt;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return v;
}

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

Result<std::string> base64_decode(std::string_view in) {
  std::array<int, 256> map{};
  map.fill(-1);
  for (size_t i = 0; i < kAlphabet.size(); ++i) map[uint8_t(kAlphabet[i])] = int(i);
  if (in.size() % 4 != 0) return Error(ErrorCode::kCorrupt, "base64 length not a multiple of 4");
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      char c = in[i + k];
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad > 0 || map[uint8_t(c)] < 0)
        return Error(ErrorCode::kCorrupt, "invalid base64 at byte " + std::to_string(i + k));
      v[k] = map[uint8_t(c)];
    }
    uint32_t x = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out += char((x >> 16) & 0xff);
    if (pad < 2) out += char((x >> 8) & 0xff);
    if (pad < 1) out += char(x & 0xff);
  }
  return out;
}

}  // namespace shardguard::checkpoint
