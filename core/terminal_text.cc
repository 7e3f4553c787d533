#include "core/terminal_text.h"

#include <cstdint>
#include <cstdio>

namespace shardguard {
namespace {

void append_hex_byte(std::string& out, unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  out += buf;
}

// Length of the valid UTF-8 sequence at the start of `s` and its code point; 0 when invalid
// (overlong forms, surrogates and values above U+10FFFF are invalid too).
size_t decode_utf8(std::string_view s, uint32_t& cp) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  size_t n = 0;
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return n;
}

// Bidirectional embeddings, overrides and isolates reorder what follows them on screen
// ("Trojan Source"); the marks LRM/RLM/ALM only affect neutral characters and stay.
bool is_bidi_control(uint32_t cp) {
  return (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string escape_for_terminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cp = 0;
    const size_t n = decode_utf8(text.substr(i), cp);
    if (n == 0) {
      append_hex_byte(out, static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7F) {
      append_hex_byte(out, static_cast<unsigned char>(cp));
    } else if ((cp >= 0x80 && cp <= 0x9F) || is_bidi_control(cp)) {
      char buf[12];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

std::string escape_lines_for_terminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t start = 0;
  while (true) {
    const size_t eol = text.find('\n', start);
    out +=
        escape_for_terminal(text.substr(start, eol == std::string_view::npos ? eol : eol - start));
    if (eol == std::string_view::npos) break;
    out += '\n';
    start = eol + 1;
  }
  return out;
}

std::string escape_json_for_terminal(std::string_view json) {
  std::string out;
  out.reserve(json.size());
  size_t i = 0;
  char buf[12];
  while (i < json.size()) {
    uint32_t cp = 0;
    const size_t n = decode_utf8(json.substr(i), cp);
    if (n == 0) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(json[i]));
      out += buf;
      ++i;
      continue;
    }
    if (cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) || is_bidi_control(cp)) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(json.substr(i, n));
    }
    i += n;
  }
  return out;
}

}  // namespace shardguard
