// HttpHeaders and parse_url: the plain-value half of io/http_client.h, no Asio or Beast.
#include <cctype>
#include <charconv>

#include "io/http_client.h"

namespace shardguard::io {

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

HttpHeaders::HttpHeaders(std::initializer_list<std::pair<std::string, std::string>> fields)
    : fields_(fields) {}

void HttpHeaders::add(std::string name, std::string value) {
  fields_.emplace_back(std::move(name), std::move(value));
}

void HttpHeaders::set(std::string name, std::string value) {
  std::erase_if(fields_, [&](const auto& f) { return iequals(f.first, name); });
  add(std::move(name), std::move(value));
}

std::optional<std::string> HttpHeaders::get(std::string_view name) const {
  for (const auto& [key, value] : fields_) {
    if (iequals(key, name)) return value;
  }
  return std::nullopt;
}

Result<ParsedUrl> parse_url(std::string_view url) {
  auto bad = [&](std::string_view why) {
    return Error(ErrorCode::kInvalid, "bad URL '" + std::string(url) + "': " + std::string(why));
  };
  constexpr std::string_view kScheme = "http://";
  if (url.size() < kScheme.size() || !iequals(url.substr(0, kScheme.size()), kScheme)) {
    return bad("only http:// is supported");
  }
  for (char c : url) {
    if (std::isspace(static_cast<unsigned char>(c)) ||
        std::iscntrl(static_cast<unsigned char>(c))) {
      return bad("contains whitespace or control characters");
    }
  }
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, slash);
  std::string_view target = slash == std::string_view::npos ? "" : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) return bad("user info is not supported");

  ParsedUrl out;
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {  // [v6 address]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unterminated '['");
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("junk after ']'");
      port_text = after.substr(1);
      if (port_text.empty()) return bad("empty port");
    }
  } else {
    const size_t colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return bad("empty port");
    }
  }
  if (out.host.empty()) return bad("missing host");
  if (!port_text.empty()) {
    unsigned port = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 ||
        port > 65535) {
      return bad("bad port '" + std::string(port_text) + "'");
    }
    out.port = static_cast<uint16_t>(port);
  }
  target = target.substr(0, target.find('#'));  // the fragment never goes on the wire
  if (target.empty()) {
    out.target = "/";
  } else if (target.front() == '?') {
    out.target = "/" + std::string(target);
  } else {
    out.target = std::string(target);
  }
  return out;
}

}  // namespace shardguard::io
