// AWS credentials and region for the S3 client, found the way the AWS CLI and SDKs find them,
// decided once at start:
//
//   1. environment    AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN)
//   2. profile        AWS_PROFILE (default "default") in AWS_SHARED_CREDENTIALS_FILE
//                     (~/.aws/credentials, `[name]`), then AWS_CONFIG_FILE (~/.aws/config,
//                     `[profile name]` or `[default]`); static keys only
//   3. instance role  EC2 IMDSv2 at AWS_EC2_METADATA_SERVICE_ENDPOINT (http://169.254.169.254)
//                     unless AWS_EC2_METADATA_DISABLED=true; refreshed before it expires
//
// A broken source stops the chain instead of falling through to the next one (as botocore
// does): partial keys, a file that does not parse, an AWS_PROFILE that does not exist, and a
// profile that needs assume-role, SSO or credential_process (refused, not half-supported).
// The files are read like botocore's RawConfigParser: key names case-insensitive, section
// names case-sensitive, `=` or `:`, whole-line `#`/`;` comments (no inline comments: the
// rest of the line is the value), indented lines continue a value, duplicates are errors.
//
// Secrets never reach a message: errors name the variable, file, line, profile and key, and
// source() says where the credentials came from. A Credentials cannot be streamed; describe()
// shows "AKIA****".
// Thread-safety: CredentialsProvider::get() and source() may be called from any number of
// threads at once; the free functions are pure or only read through CredentialSources.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/result.h"
#include "storage/http.h"

namespace shardguard::storage::s3 {

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  std::optional<WallTime> expiration;
};

// "AKIA****": the access key id's first 4 characters, for logs. The only way to show one.
std::string describe(const Credentials& credentials);
std::ostream& operator<<(std::ostream&, const Credentials&) = delete;

inline constexpr uint64_t kMaxAwsConfigFileBytes = 1ull << 20;
inline constexpr uint64_t kMaxImdsDocumentBytes = 64ull << 10;
inline constexpr char kDefaultImdsEndpoint[] = "http://169.254.169.254";
inline constexpr char kImdsTokenPath[] = "/latest/api/token";
inline constexpr char kImdsRolesPath[] = "/latest/meta-data/iam/security-credentials/";
// As the SDKs: 1 s to connect, 2 s a request, a few tries of a request that failed in transit
// or answered 429/5xx, one new token after a 401.
inline constexpr Duration kImdsConnectTimeout = std::chrono::seconds(1);
inline constexpr Duration kImdsRequestTimeout = std::chrono::seconds(2);
inline constexpr int kImdsAttempts = 3;
inline constexpr int kImdsTokenTtlSeconds = 21600;
// Instance-role credentials are refreshed once they are this close to Expiration; EC2 offers
// new ones at least 5 minutes before the old ones expire.
inline constexpr Duration kRefreshWindow = std::chrono::minutes(5);
// After a refresh that failed (or brought no newer credentials) while the cached ones are
// still valid, the next try waits this long, so upload threads do not hammer the IMDS.
inline constexpr Duration kRefreshRetryInterval = std::chrono::seconds(10);

// Everything the chain may read, injected; only main builds the real ones (system()).
struct CredentialSources {
  // An environment variable; nullopt when unset. Empty values count as unset.
  std::function<std::optional<std::string>(std::string_view)> getenv;
  // Where "~" points; empty: no default file locations.
  std::string home_dir;
  // A whole file: kNotFound when it does not exist (that file is then skipped).
  std::function<Result<std::string>(const std::string&)> read_file;
  HttpTransport* http = nullptr;  // for the IMDS; must outlive the providers
  const Clock* clock = nullptr;   // must outlive the providers
  // Told about a failed refresh that was covered by still-valid credentials; may be empty.
  std::function<void(std::string_view)> warn;

  // The process's own: ::getenv, $HOME (else the passwd entry), files read up to
  // kMaxAwsConfigFileBytes + 1 bytes, RealClock; `warn` left empty.
  static CredentialSources system(HttpTransport& http);
};

struct CredentialsStats {
  uint64_t refreshes = 0;         // fetches that brought credentials (the first included)
  uint64_t refresh_failures = 0;  // fetches that failed
  std::string last_failure;       // the last failure's message; empty if none
};

class CredentialsProvider {
 public:
  virtual ~CredentialsProvider() = default;
  // Credentials valid now, refreshed first when they are about to expire. Thread-safe;
  // only one refresh runs at a time. An error names the source, never a secret.
  virtual Result<Credentials> get() = 0;
  // Where they come from: "environment", "profile 'x' in /home/u/.aws/credentials",
  // "EC2 instance role 'r' (IMDSv2)". Never a secret.
  virtual std::string source() const = 0;
  // Refresh counts; all zero for credentials that never refresh.
  virtual CredentialsStats stats() const { return {}; }
};

// The first source of the chain that has credentials, checked once (the instance role is
// fetched once here). kNotFound when none has any, in one message listing what was tried
// (an IMDS that failed, with its endpoint and answer); a broken source (see the top of this
// file) is its own error: kInvalid, or kNotFound for an AWS_PROFILE that does not exist.
Result<std::unique_ptr<CredentialsProvider>> resolve_credentials(const CredentialSources& sources);

// AWS_REGION, then AWS_DEFAULT_REGION, then `region` of the AWS_PROFILE profile in the config
// file; nullopt when none is set. kInvalid for a config file that does not parse or a value
// that is not a region name ("us-east-1": lower-case letters, digits, '-').
Result<std::optional<std::string>> resolve_region(const CredentialSources& sources);

// Fixed credentials (tests, or a caller that got them elsewhere); `source` as source().
std::unique_ptr<CredentialsProvider> make_static_provider(Credentials credentials,
                                                          std::string source);

// The IMDS answer for a role: a JSON object of at most kMaxImdsDocumentBytes, no duplicate
// keys, Code "Success", AccessKeyId/SecretAccessKey/Token non-empty strings of printable
// ASCII, Expiration an RFC 3339 time. kCorrupt names the field; never echoes a secret.
Result<Credentials> parse_imds_credentials(std::string_view json);

// One file of the shared config format, as parsed: sections by name as written (the
// "profile " prefix kept), keys lower-cased, values trimmed.
struct AwsIniEntry {
  std::string value;
  int line = 0;
};
struct AwsIniSection {
  int line = 0;
  std::map<std::string, AwsIniEntry> keys;
};
using AwsIniFile = std::map<std::string, AwsIniSection>;

// Parses `text` read from `path` (named in errors with the line: "path:12: ..."). kInvalid
// for a key outside a section, a line that is neither, duplicates, or text over
// kMaxAwsConfigFileBytes. Errors never quote the line (it may hold a secret).
Result<AwsIniFile> parse_aws_ini(std::string_view text, std::string_view path);

}  // namespace shardguard::storage::s3
