#include "storage/s3/sigv4.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <utility>

namespace shardguard::storage::s3 {
namespace {

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";
constexpr std::string_view kHexDigits = "0123456789abcdef";
constexpr std::string_view kUpperHexDigits = "0123456789ABCDEF";

using Digest = std::array<unsigned char, 32>;  // SHA-256 and HMAC-SHA256 output

// libcrypto cannot hash only when it cannot allocate: nothing a caller could recover from,
// and a signature made of nothing would only come back as a 403 much later.
[[noreturn]] void crypto_failure(const char* what) {
  std::fprintf(stderr, "shardguard: sigv4: libcrypto %s failed\n", what);
  std::abort();
}

std::string hex(std::span<const unsigned char> bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const unsigned char b : bytes) {
    out += kHexDigits[b >> 4];
    out += kHexDigits[b & 0xf];
  }
  return out;
}

Digest sha256(const void* data, size_t size) {
  Digest md{};
  unsigned int len = 0;
  if (EVP_Digest(data, size, md.data(), &len, EVP_sha256(), nullptr) != 1 || len != md.size()) {
    crypto_failure("SHA-256");
  }
  return md;
}

Digest hmac(std::span<const unsigned char> key, std::string_view data) {
  Digest md{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), md.data(),
           &len) == nullptr ||
      len != md.size()) {
    crypto_failure("HMAC-SHA256");
  }
  return md;
}

// kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, day), region), service), "aws4_request").
// Intermediate keys are wiped: each one signs anything of that day, region and service.
Digest signing_key(std::string_view secret, std::string_view day, std::string_view region,
                   std::string_view service) {
  std::string seed = "AWS4";
  seed += secret;
  Digest key = hmac({reinterpret_cast<const unsigned char*>(seed.data()), seed.size()}, day);
  OPENSSL_cleanse(seed.data(), seed.size());
  for (const std::string_view part : {region, service, std::string_view("aws4_request")}) {
    const Digest next = hmac(key, part);
    OPENSSL_cleanse(key.data(), key.size());
    key = next;
  }
  return key;
}

bool is_unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == '~';
}

bool is_hex_digit(char c) {
  return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
}

char to_upper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }
char to_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

void append_escaped(std::string& out, unsigned char c) {
  out += '%';
  out += kUpperHexDigits[c >> 4];
  out += kUpperHexDigits[c & 0xf];
}

// The canonical form of a path or query piece as sent: what is already a %XX triplet stays
// one (hex upper-cased, as S3 re-encodes after decoding), anything else not unreserved is
// encoded. Encoding an encoded string again is then a no-op, never a double encoding.
std::string canonical_encode(std::string_view s, bool keep_slash) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (is_unreserved(c) || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else if (c == '%' && i + 2 < s.size() && is_hex_digit(s[i + 1]) && is_hex_digit(s[i + 2])) {
      out += '%';
      out += to_upper(s[i + 1]);
      out += to_upper(s[i + 2]);
      i += 2;
    } else {
      append_escaped(out, c);
    }
  }
  return out;
}

std::string canonical_query(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> pairs;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view piece = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (piece.empty()) continue;  // "a=1&&b=2" or a trailing '&': no parameter there
    const size_t eq = piece.find('=');
    const std::string_view name = piece.substr(0, eq);
    const std::string_view value =
        eq == std::string_view::npos ? std::string_view() : piece.substr(eq + 1);
    pairs.emplace_back(canonical_encode(name, false), canonical_encode(value, false));
  }
  std::sort(pairs.begin(), pairs.end());
  std::string out;
  for (const auto& [name, value] : pairs) {
    if (!out.empty()) out += '&';
    out += name;
    out += '=';
    out += value;
  }
  return out;
}

bool is_blank(char c) { return c == ' ' || c == '\t'; }

// Trimmed, with every inner run of blanks one space ("  a   b " -> "a b").
std::string canonical_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  bool pending_space = false;
  for (const char c : v) {
    if (is_blank(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += c;
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), to_lower);
  return out;
}

std::string trimmed_lower(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return lower(s);
}

Canonical canonical_of(std::string_view method, std::string_view uri, std::string_view query,
                       std::span<const storage::HttpHeader> headers,
                       std::string_view payload_hash) {
  std::vector<std::pair<std::string, std::string>> lines;
  lines.reserve(headers.size());
  for (const auto& h : headers) lines.emplace_back(trimmed_lower(h.name), canonical_value(h.value));
  // Stable: values of a repeated name are joined in the order they were sent.
  std::stable_sort(lines.begin(), lines.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });

  std::string canonical_headers;
  std::string signed_headers;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& name = lines[i].first;
    const bool repeat = i > 0 && lines[i - 1].first == name;
    if (repeat) {
      canonical_headers.back() = ',';  // replaces the '\n' that closed the previous value
    } else {
      if (!signed_headers.empty()) signed_headers += ';';
      signed_headers += name;
      canonical_headers += name;
      canonical_headers += ':';
    }
    canonical_headers += lines[i].second;
    canonical_headers += '\n';
  }

  Canonical out;
  out.request.reserve(256 + canonical_headers.size() + uri.size() + query.size());
  out.request += method;
  out.request += '\n';
  out.request += uri.empty() ? std::string("/") : canonical_encode(uri, true);
  out.request += '\n';
  out.request += canonical_query(query);
  out.request += '\n';
  out.request += canonical_headers;
  out.request += '\n';
  out.request += signed_headers;
  out.request += '\n';
  out.request += payload_hash;
  out.signed_headers = std::move(signed_headers);
  return out;
}

std::string scope(WallTime t, std::string_view region, std::string_view service) {
  std::string out = amz_day(t);
  out += '/';
  out += region;
  out += '/';
  out += service;
  out += "/aws4_request";
  return out;
}

bool is_signing_header(std::string_view name) {
  const std::string n = trimmed_lower(name);
  return n == "x-amz-date" || n == "x-amz-content-sha256" || n == "x-amz-security-token" ||
         n == "authorization";
}

}  // namespace

std::string sha256_hex(std::span<const std::byte> data) {
  return hex(sha256(data.data(), data.size()));
}

std::string sha256_hex(std::string_view data) { return hex(sha256(data.data(), data.size())); }

std::string uri_encode(std::string_view s, bool keep_slash) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (is_unreserved(c) || (keep_slash && c == '/')) {
      out += ch;
    } else {
      append_escaped(out, c);
    }
  }
  return out;
}

std::string amz_date(WallTime t) {
  using namespace std::chrono;
  const auto secs = floor<seconds>(t);
  const auto day = floor<days>(secs);
  const year_month_day ymd{day};
  const hh_mm_ss<seconds> hms{secs - day};
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04d%02u%02uT%02d%02d%02dZ", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                static_cast<int>(hms.hours().count()), static_cast<int>(hms.minutes().count()),
                static_cast<int>(hms.seconds().count()));
  return buf;
}

std::string amz_day(WallTime t) { return amz_date(t).substr(0, 8); }

Canonical canonical_request(const CanonicalInput& in) {
  return canonical_of(in.method, in.canonical_uri, in.query, in.headers, in.payload_hash);
}

std::string string_to_sign(WallTime t, std::string_view region, std::string_view service,
                           std::string_view canonical_request) {
  std::string out(kAlgorithm);
  out += '\n';
  out += amz_date(t);
  out += '\n';
  out += scope(t, region, service);
  out += '\n';
  out += sha256_hex(canonical_request);
  return out;
}

std::string signature(const Credentials& credentials, WallTime t, std::string_view region,
                      std::string_view service, std::string_view string_to_sign) {
  Digest key = signing_key(credentials.secret_access_key, amz_day(t), region, service);
  const Digest mac = hmac(key, string_to_sign);
  OPENSSL_cleanse(key.data(), key.size());
  return hex(mac);
}

std::string authorization_header(const Credentials& credentials, WallTime t,
                                 std::string_view region, std::string_view service,
                                 std::string_view signed_headers, std::string_view signature) {
  std::string out(kAlgorithm);
  out += " Credential=";
  out += credentials.access_key_id;
  out += '/';
  out += scope(t, region, service);
  out += ", SignedHeaders=";
  out += signed_headers;
  out += ", Signature=";
  out += signature;
  return out;
}

void sign_request(std::string_view method, std::string_view encoded_path,
                  std::string_view encoded_query, std::vector<storage::HttpHeader>& headers,
                  std::string_view payload_hash, const Credentials& credentials,
                  std::string_view region, WallTime now, std::string_view service) {
  std::erase_if(headers, [](const storage::HttpHeader& h) { return is_signing_header(h.name); });
  headers.push_back({"x-amz-date", amz_date(now)});
  headers.push_back({"x-amz-content-sha256", std::string(payload_hash)});
  if (!credentials.session_token.empty()) {
    headers.push_back({"x-amz-security-token", credentials.session_token});
  }
  const Canonical canonical =
      canonical_of(method, encoded_path, encoded_query, headers, payload_hash);
  const std::string to_sign = string_to_sign(now, region, service, canonical.request);
  const std::string sig = signature(credentials, now, region, service, to_sign);
  headers.push_back({"Authorization", authorization_header(credentials, now, region, service,
                                                           canonical.signed_headers, sig)});
}

}  // namespace shardguard::storage::s3
