#include "checkpoint/strict_json.h"

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/value_stack.hpp>
#include <cstdint>
#include <exception>
#include <optional>
#include <unordered_set>
#include <vector>

namespace shardguard::checkpoint {
namespace json = boost::json;

namespace {

// Builds the value like json::parser's own handler, and keeps one key set per open object.
class DuplicateKeyHandler {
 public:
  static constexpr std::size_t max_object_size = json::object::max_size();
  static constexpr std::size_t max_array_size = json::array::max_size();
  static constexpr std::size_t max_key_size = json::string::max_size();
  static constexpr std::size_t max_string_size = json::string::max_size();

  DuplicateKeyHandler() { stack_.reset(); }

  json::value release() { return stack_.release(); }
  const std::optional<std::string>& duplicate() const { return duplicate_; }

  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }
  bool on_object_begin(json::error_code&) {
    keys_.emplace_back();
    return true;
  }
  bool on_object_end(std::size_t n, json::error_code&) {
    keys_.pop_back();
    stack_.push_object(n);
    return true;
  }
  bool on_array_begin(json::error_code&) { return true; }
  bool on_array_end(std::size_t n, json::error_code&) {
    stack_.push_array(n);
    return true;
  }
  bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
    stack_.push_chars(s);
    key_.append(s.data(), s.size());
    return true;
  }
  bool on_key(json::string_view s, std::size_t, json::error_code& ec) {
    stack_.push_key(s);
    key_.append(s.data(), s.size());
    if (keys_.back().contains(key_)) {
      duplicate_ = std::move(key_);
      ec = boost::system::errc::make_error_code(boost::system::errc::invalid_argument);
      return false;
    }
    keys_.back().insert(std::move(key_));
    key_.clear();
    return true;
  }
  bool on_string_part(json::string_view s, std::size_t, json::error_code&) {
    stack_.push_chars(s);
    return true;
  }
  bool on_string(json::string_view s, std::size_t, json::error_code&) {
    stack_.push_string(s);
    return true;
  }
  bool on_number_part(json::string_view, json::error_code&) { return true; }
  bool on_int64(std::int64_t i, json::string_view, json::error_code&) {
    stack_.push_int64(i);
    return true;
  }
  bool on_uint64(std::uint64_t u, json::string_view, json::error_code&) {
    stack_.push_uint64(u);
    return true;
  }
  bool on_double(double d, json::string_view, json::error_code&) {
    stack_.push_double(d);
    return true;
  }
  bool on_bool(bool b, json::error_code&) {
    stack_.push_bool(b);
    return true;
  }
  bool on_null(json::error_code&) {
    stack_.push_null();
    return true;
  }
  bool on_comment_part(json::string_view, json::error_code&) { return true; }
  bool on_comment(json::string_view, json::error_code&) { return true; }

 private:
  json::value_stack stack_;
  std::vector<std::unordered_set<std::string>> keys_;
  std::string key_;  // the parts of a key split across internal buffers
  std::optional<std::string> duplicate_;
};

// Length of the UTF-8 sequence at s[i], or 0 if it is malformed.
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  auto byte = [&](std::size_t k) { return static_cast<uint8_t>(s[k]); };
  auto is_cont = [&](std::size_t k) { return k < s.size() && (byte(k) & 0xC0) == 0x80; };
  uint8_t b0 = byte(i);
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return is_cont(i + 1) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (!is_cont(i + 1) || !is_cont(i + 2)) return 0;
    uint8_t b1 = byte(i + 1);
    if (b0 == 0xE0 && b1 < 0xA0) return 0;  // overlong
    if (b0 == 0xED && b1 > 0x9F) return 0;  // UTF-16 surrogate
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (!is_cont(i + 1) || !is_cont(i + 2) || !is_cont(i + 3)) return 0;
    uint8_t b1 = byte(i + 1);
    if (b0 == 0xF0 && b1 < 0x90) return 0;  // overlong
    if (b0 == 0xF4 && b1 > 0x8F) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

bool is_valid_utf8(std::string_view bytes) {
  std::size_t i = 0;
  while (i < bytes.size()) {
    std::size_t n = utf8_sequence_length(bytes, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

Result<json::value> parse_json_strict(std::string_view text) {
  json::parse_options options;
  options.max_depth = 128;
  json::basic_parser<DuplicateKeyHandler> parser(options);
  json::error_code ec;
  try {
    std::size_t used = parser.write_some(false, text.data(), text.size(), ec);
    if (!ec && used < text.size()) ec = json::error::extra_data;
    if (parser.handler().duplicate()) {
      // Keys can be huge; a prefix identifies it well enough.
      std::string message = "duplicate key ";
      append_json_string(message, parser.handler().duplicate()->substr(0, 200));
      return Error(ErrorCode::kCorrupt, std::move(message));
    }
    if (ec) return Error(ErrorCode::kCorrupt, "not valid JSON: " + ec.message());
    return parser.handler().release();
  } catch (const std::exception& e) {  // allocation failures of a huge document
    return Error(ErrorCode::kCorrupt, std::string("JSON too large to parse: ") + e.what());
  }
}

void append_json_string(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<uint8_t>(c) < 0x20) {
          out += "\\u00";
          out += kHex[static_cast<uint8_t>(c) >> 4];
          out += kHex[static_cast<uint8_t>(c) & 0xF];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

}  // namespace shardguard::checkpoint
