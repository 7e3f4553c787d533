// AWS Signature Version 4 for S3 requests: the canonical request, the string to sign, the
// signature and the Authorization header, over libcrypto's SHA-256 and HMAC-SHA256 (no
// cryptography is written here). sign_request() is what the S3 client calls; the pieces are
// public so that AWS's published test vectors can check each step byte for byte.
//
// S3 rules, which differ from the generic SigV4 of other services: the path is never
// normalised ('.', '..' and '//' are signed as sent, since they are part of object keys), and
// each path segment is percent-encoded once. The query is signed as the sorted, encoded
// name=value pairs, a valueless parameter as "name=" ("?uploads" signs as "uploads=").
//
// Thread-safety: every function is pure (no shared state, no cache) and may be called from any
// number of threads at once. libcrypto failing to hash (out of memory) aborts the process: it
// is not a condition a caller could handle, and a wrong signature would only surface as a 403.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "storage/http.h"
#include "storage/s3/credentials.h"  // Credentials

namespace shardguard::storage::s3 {

// The payload hash S3 accepts in place of a body's SHA-256 (then the body is not signed).
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
// SHA-256 of no bytes: the payload hash of a GET, HEAD or DELETE.
inline constexpr std::string_view kEmptyPayloadHash =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// SHA-256 of `data` as 64 lower-case hex digits (the form x-amz-content-sha256 takes).
std::string sha256_hex(std::span<const std::byte> data);
std::string sha256_hex(std::string_view data);

// Percent-encodes `s` (raw bytes, e.g. a UTF-8 object key) the way S3 signs it: RFC 3986
// unreserved characters A-Z a-z 0-9 - _ . ~ are kept, every other byte becomes %XX (upper-case
// hex); '/' is kept only when `keep_slash` (a path), so a space is %20, '+' %2B, '*' %2A.
std::string uri_encode(std::string_view s, bool keep_slash);

// The request time in SigV4's two forms, in UTC: "20150830T123600Z" (x-amz-date) and
// "20150830" (the credential scope). Sub-second parts are dropped.
std::string amz_date(WallTime t);
std::string amz_day(WallTime t);

// What the canonical request is made of, as the request is sent.
struct CanonicalInput {
  std::string method;  // "GET", "PUT", ...
  // The URI path as sent, normally already encoded with uri_encode(key, true). Percent
  // triplets are kept (hex upper-cased); any byte that is neither unreserved nor '/' is
  // encoded, so a raw path ("/a b/ሴ") signs like its encoded form. Empty means "/".
  std::string canonical_uri;
  // The query as sent, without '?', may be empty. Split on '&' and the first '='; names and
  // values are encoded like the path (triplets kept, '/' encoded, a raw '+' is a literal plus).
  std::string query;
  std::vector<storage::HttpHeader> headers;  // as sent: any case, may repeat; all are signed
  std::string payload_hash;                  // sha256_hex(body) or kUnsignedPayload
};

struct Canonical {
  std::string request;         // the canonical request, lines joined by '\n'
  std::string signed_headers;  // "host;range;x-amz-content-sha256;x-amz-date"
};

// The canonical request of `in`: header names lower-cased and sorted, values trimmed with
// inner runs of spaces and tabs collapsed to one space, repeated names joined with ',' in the
// order sent; query pairs sorted by encoded name then encoded value, "name=" when valueless.
Canonical canonical_request(const CanonicalInput& in);

// "AWS4-HMAC-SHA256\n<amz_date>\n<day>/<region>/<service>/aws4_request\n<sha256 of creq>".
std::string string_to_sign(WallTime t, std::string_view region, std::string_view service,
                           std::string_view canonical_request);

// The hex HMAC-SHA256 of `string_to_sign` under the key derived from the secret, the day of
// `t`, `region` and `service` (the kDate/kRegion/kService/kSigning chain).
std::string signature(const Credentials& credentials, WallTime t, std::string_view region,
                      std::string_view service, std::string_view string_to_sign);

// The Authorization header value: "AWS4-HMAC-SHA256 Credential=<key id>/<scope>,
// SignedHeaders=<list>, Signature=<hex>". It names the access key id, never the secret.
std::string authorization_header(const Credentials& credentials, WallTime t,
                                 std::string_view region, std::string_view service,
                                 std::string_view signed_headers, std::string_view signature);

// Signs a request in place: adds x-amz-date (from `now`), x-amz-content-sha256
// (= `payload_hash`), x-amz-security-token (when the credentials have a session token) and
// Authorization to `headers`, signing every header in the list. `headers` must already hold
// Host and every other header to send. Any of these four already present (a request signed
// before, now retried) is replaced. `encoded_path` and `encoded_query` (no '?') are as sent.
void sign_request(std::string_view method, std::string_view encoded_path,
                  std::string_view encoded_query, std::vector<storage::HttpHeader>& headers,
                  std::string_view payload_hash, const Credentials& credentials,
                  std::string_view region, WallTime now, std::string_view service = "s3");

}  // namespace shardguard::storage::s3
