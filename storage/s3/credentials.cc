#include "storage/s3/credentials.h"

#include <fcntl.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json/basic_parser_impl.hpp>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <set>
#include <vector>

#include "core/time_formats.h"

namespace shardguard::storage::s3 {

namespace json = boost::json;

namespace {

constexpr char kAssumeRoleHint[] = "export the credentials or use the instance role";
constexpr uint64_t kMaxImdsSmallBody = 4096;  // a token, a role name

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n\f\v");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r\n\f\v") - first + 1);
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// What may go into a request header or a signature: printable ASCII, no space.
bool header_safe(std::string_view s) {
  for (unsigned char c : s)
    if (c < 0x21 || c > 0x7e) return false;
  return true;
}

// Non-secret text from the outside, made safe for a message: '?' for odd bytes, bounded.
std::string printable(std::string_view s, size_t max) {
  std::string out;
  for (unsigned char c : s.substr(0, max))
    out += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  if (s.size() > max) out += "...";
  return out;
}

// ---- the IMDS document: a flat JSON object, duplicates refused -----------------------------

struct JsonMember {
  bool is_string = false;
  std::string text;
};

// Keeps the top-level members of an object (strings with their text, other values as
// "not a string"); Boost.JSON's own parser would keep the last of duplicate keys silently.
class TopLevelHandler {
 public:
  static constexpr std::size_t max_object_size = 4096;
  static constexpr std::size_t max_array_size = 4096;
  static constexpr std::size_t max_key_size = kMaxImdsDocumentBytes;
  static constexpr std::size_t max_string_size = kMaxImdsDocumentBytes;

  std::map<std::string, JsonMember> members;
  std::optional<std::string> problem;  // set when the handler stopped the parse

  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }
  bool on_object_begin(json::error_code& ec) {
    if (depth_ == 1) members[key_] = {};
    return open(ec, true);
  }
  bool on_object_end(std::size_t, json::error_code&) { return --depth_, true; }
  bool on_array_begin(json::error_code& ec) {
    if (depth_ == 1) members[key_] = {};
    return open(ec, false);
  }
  bool on_array_end(std::size_t, json::error_code&) { return --depth_, true; }
  bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
    if (depth_ == 1) part_.append(s.data(), s.size());
    return true;
  }
  bool on_key(json::string_view s, std::size_t, json::error_code& ec) {
    if (depth_ != 1) return true;
    key_ = std::move(part_.append(s.data(), s.size()));
    part_.clear();
    if (!seen_.insert(key_).second) return fail(ec, "duplicate key '" + printable(key_, 40) + "'");
    return true;
  }
  bool on_string_part(json::string_view s, std::size_t, json::error_code&) {
    if (depth_ == 1) part_.append(s.data(), s.size());
    return true;
  }
  bool on_string(json::string_view s, std::size_t, json::error_code& ec) {
    if (depth_ == 0) return fail(ec, "not a JSON object");
    if (depth_ == 1) members[key_] = {true, std::move(part_.append(s.data(), s.size()))};
    part_.clear();
    return true;
  }
  bool on_number_part(json::string_view, json::error_code&) { return true; }
  bool on_int64(std::int64_t, json::string_view, json::error_code& ec) { return scalar(ec); }
  bool on_uint64(std::uint64_t, json::string_view, json::error_code& ec) { return scalar(ec); }
  bool on_double(double, json::string_view, json::error_code& ec) { return scalar(ec); }
  bool on_bool(bool, json::error_code& ec) { return scalar(ec); }
  bool on_null(json::error_code& ec) { return scalar(ec); }
  bool on_comment_part(json::string_view, json::error_code&) { return true; }
  bool on_comment(json::string_view, json::error_code&) { return true; }

 private:
  bool open(json::error_code& ec, bool object) {
    if (depth_ == 0 && !object) return fail(ec, "not a JSON object");
    return ++depth_, true;
  }
  bool scalar(json::error_code& ec) {
    if (depth_ == 0) return fail(ec, "not a JSON object");
    if (depth_ == 1) members[key_] = {};
    return true;
  }
  bool fail(json::error_code& ec, std::string why) {
    problem = std::move(why);
    ec = boost::system::errc::make_error_code(boost::system::errc::invalid_argument);
    return false;
  }

  int depth_ = 0;
  std::string key_, part_;
  std::set<std::string> seen_;
};

Error corrupt(std::string why) { return Error(ErrorCode::kCorrupt, "IMDS credentials: " + why); }

// ---- the shared config files ---------------------------------------------------------------

Error ini_error(std::string_view path, int line, std::string_view why) {
  return Error(ErrorCode::kInvalid,
               std::string(path) + ":" + std::to_string(line) + ": " + std::string(why));
}

// "profile NAME" (config file) -> NAME; botocore splits the header like a shell would.
std::optional<std::string> config_profile_name(std::string_view section) {
  if (section.size() < 8 || section.substr(0, 7) != "profile" ||
      (section[7] != ' ' && section[7] != '\t')) {
    return std::nullopt;
  }
  std::string_view name = trim(section.substr(7));
  if (name.size() >= 2 && (name.front() == '"' || name.front() == '\'') &&
      name.back() == name.front()) {
    name = name.substr(1, name.size() - 2);
  }
  if (name.empty() || name.find_first_of(" \t") != std::string_view::npos) return std::nullopt;
  return std::string(name);
}

// The profile's section of the config file: [default] for "default" (or [profile default];
// the later one, as botocore), [profile NAME] otherwise.
const AwsIniSection* find_config_profile(const AwsIniFile& file, const std::string& profile) {
  const AwsIniSection* found = nullptr;
  for (const auto& [name, section] : file) {
    const bool match =
        (profile == "default" && name == "default") || config_profile_name(name) == profile;
    if (match && (found == nullptr || section.line > found->line)) found = &section;
  }
  return found;
}

const AwsIniSection* find_section(const std::optional<AwsIniFile>& file, const std::string& name) {
  if (!file) return nullptr;
  auto it = file->find(name);
  return it == file->end() ? nullptr : &it->second;
}

// The kind of profile a key makes, when we refuse that kind.
std::optional<std::string_view> refused_kind(const std::string& key) {
  if (key == "role_arn" || key == "source_profile" || key == "credential_source" ||
      key == "web_identity_token_file" || key == "role_session_name") {
    return "assume-role";
  }
  if (key.rfind("sso_", 0) == 0) return "SSO";
  if (key == "credential_process") return "credential_process";
  return std::nullopt;
}

std::optional<std::string> env(const CredentialSources& src, std::string_view name) {
  if (!src.getenv) return std::nullopt;
  auto v = src.getenv(name);
  if (v && v->empty()) return std::nullopt;
  return v;
}

std::string expand_home(std::string path, const std::string& home) {
  if (!home.empty() && (path == "~" || path.rfind("~/", 0) == 0)) return home + path.substr(1);
  return path;
}

struct ProfilePaths {
  std::string profile;
  bool explicit_profile = false;  // AWS_PROFILE was set
  std::string credentials;        // empty: no such file to look at
  std::string config;
};

ProfilePaths profile_paths(const CredentialSources& src) {
  ProfilePaths p;
  const auto named = env(src, "AWS_PROFILE");
  p.profile = named.value_or("default");
  p.explicit_profile = named.has_value();
  auto path = [&](std::string_view var, std::string_view fallback) {
    if (auto v = env(src, var)) return expand_home(*v, src.home_dir);
    return src.home_dir.empty() ? std::string() : src.home_dir + std::string(fallback);
  };
  p.credentials = path("AWS_SHARED_CREDENTIALS_FILE", "/.aws/credentials");
  p.config = path("AWS_CONFIG_FILE", "/.aws/config");
  return p;
}

// The parsed file, or nullopt when there is none to read.
Result<std::optional<AwsIniFile>> load_ini(const CredentialSources& src, const std::string& path) {
  if (path.empty() || !src.read_file) return std::optional<AwsIniFile>();
  Result<std::string> text = src.read_file(path);
  if (!text.ok()) {
    if (text.error().code() == ErrorCode::kNotFound) return std::optional<AwsIniFile>();
    if (text.error().message().find(path) != std::string::npos) return std::move(text).error();
    return std::move(text).error().context("read '" + path + "'");
  }
  SG_ASSIGN_OR_RETURN(AwsIniFile file, parse_aws_ini(*text, path));
  return std::optional<AwsIniFile>(std::move(file));
}

// ---- providers -----------------------------------------------------------------------------

class StaticProvider final : public CredentialsProvider {
 public:
  StaticProvider(Credentials c, std::string source)
      : credentials_(std::move(c)), source_(std::move(source)) {}
  Result<Credentials> get() override { return credentials_; }
  std::string source() const override { return source_; }

 private:
  const Credentials credentials_;
  const std::string source_;
};

// Instance-role credentials over IMDSv2, cached, refreshed by one caller at a time.
class ImdsProvider final : public CredentialsProvider {
 public:
  ImdsProvider(std::string endpoint, HttpTransport& http, const Clock& clock,
               std::function<void(std::string_view)> warn)
      : endpoint_(std::move(endpoint)), http_(http), clock_(clock), warn_(std::move(warn)) {}

  Result<Credentials> get() override;
  std::string source() const override {
    std::lock_guard lock(mu_);
    return "EC2 instance role '" + role_ + "' (IMDSv2)";
  }
  CredentialsStats stats() const override {
    std::lock_guard lock(mu_);
    return stats_;
  }

 private:
  struct Fetched {
    std::string role;
    Credentials credentials;
  };

  Result<Fetched> fetch() const;
  Result<std::string> fetch_token() const;
  // One request, tried again while it fails in transit or answers 429/5xx.
  Result<HttpResponse> call(std::string method, const std::string& path,
                            std::vector<HttpHeader> headers, uint64_t max_body) const;
  Error status_error(std::string_view method, const std::string& path, const HttpResponse& r,
                     std::string_view hint = {}) const;
  // The error of a get() that has nothing valid to return; mu_ held.
  Error no_credentials_error() const;

  const std::string endpoint_;
  HttpTransport& http_;
  const Clock& clock_;
  const std::function<void(std::string_view)> warn_;

  mutable std::mutex mu_;
  std::condition_variable refreshed_;
  std::optional<Credentials> cached_;
  std::string role_;
  bool refreshing_ = false;
  uint64_t generation_ = 0;  // refreshes finished
  WallTime next_attempt_{};
  std::optional<Error> last_error_;
  CredentialsStats stats_;
};

Result<HttpResponse> ImdsProvider::call(std::string method, const std::string& path,
                                        std::vector<HttpHeader> headers, uint64_t max_body) const {
  HttpRequest request;
  request.method = std::move(method);
  request.url = endpoint_ + path;
  request.headers = std::move(headers);
  request.max_body = max_body;
  request.timeout = kImdsRequestTimeout;
  request.connect_timeout = kImdsConnectTimeout;
  Result<HttpResponse> response = Error(ErrorCode::kInternal, "IMDS: no attempt");
  for (int attempt = 0; attempt < kImdsAttempts; ++attempt) {
    response = http_.perform(request);
    if (response.ok() && response->status < 500 && response->status != 429) break;
  }
  return response;
}

Error ImdsProvider::status_error(std::string_view method, const std::string& path,
                                 const HttpResponse& r, std::string_view hint) const {
  std::string message =
      describe_request(method, endpoint_ + path) + ": HTTP " + std::to_string(r.status);
  if (r.status >= 500 || r.status == 429)
    message += " (" + std::to_string(kImdsAttempts) + " tries)";
  if (!hint.empty()) message += ": " + std::string(hint);
  const ErrorCode code = r.status == 404 ? ErrorCode::kNotFound : ErrorCode::kIo;
  return Error(code, std::move(message));
}

Result<std::string> ImdsProvider::fetch_token() const {
  auto r = call("PUT", kImdsTokenPath,
                {{"X-aws-ec2-metadata-token-ttl-seconds", std::to_string(kImdsTokenTtlSeconds)}},
                kMaxImdsSmallBody);
  if (!r.ok()) {
    if (r.error().code() != ErrorCode::kTimeout) return std::move(r).error();
    return Error(
        ErrorCode::kTimeout,
        r.error().message() + " (no IMDS here, or a container behind a metadata hop limit of 1)");
  }
  if (r->status != 200) return status_error("PUT", kImdsTokenPath, *r);
  const std::string_view token = trim(r->body);
  if (token.empty() || !header_safe(token)) {
    return Error(ErrorCode::kCorrupt,
                 describe_request("PUT", endpoint_ + kImdsTokenPath) + ": not a token");
  }
  return std::string(token);
}

Result<ImdsProvider::Fetched> ImdsProvider::fetch() const {
  for (int round = 0;; ++round) {  // a token may expire between calls: one new one
    SG_ASSIGN_OR_RETURN(const std::string token, fetch_token());
    const std::vector<HttpHeader> auth = {{"X-aws-ec2-metadata-token", token}};
    auto list = call("GET", kImdsRolesPath, auth, kMaxImdsSmallBody);
    if (!list.ok()) return std::move(list).error();
    if (list->status == 401 && round == 0) continue;
    if (list->status == 404) {
      return status_error("GET", kImdsRolesPath, *list, "no instance role is attached");
    }
    if (list->status != 200) return status_error("GET", kImdsRolesPath, *list);
    const std::string_view role =
        trim(std::string_view(list->body).substr(0, list->body.find('\n')));
    const bool valid_name = !role.empty() && role.size() <= 64 &&
                            role.find_first_not_of(
                                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRST"
                                "UVWXYZ0123456789+=,.@_-") == std::string::npos;
    if (!valid_name) {
      return Error(ErrorCode::kCorrupt, describe_request("GET", endpoint_ + kImdsRolesPath) +
                                            ": not an IAM role name: '" + printable(role, 64) +
                                            "'");
    }
    const std::string path = kImdsRolesPath + std::string(role);
    auto doc = call("GET", path, auth, kMaxImdsDocumentBytes);
    if (!doc.ok()) return std::move(doc).error();
    if (doc->status == 401 && round == 0) continue;
    if (doc->status != 200) return status_error("GET", path, *doc);  // the body: never shown
    Result<Credentials> c = parse_imds_credentials(doc->body);
    if (!c.ok()) return std::move(c).error().context(describe_request("GET", endpoint_ + path));
    if (*c->expiration <= clock_.wall_now()) {
      return Error(ErrorCode::kCorrupt, describe_request("GET", endpoint_ + path) +
                                            ": credentials that expired at " +
                                            format_rfc3339(*c->expiration));
    }
    return Fetched{std::string(role), std::move(c).value()};
  }
}

Error ImdsProvider::no_credentials_error() const {
  const Error cause = last_error_.value_or(Error(ErrorCode::kInternal, "no refresh finished"));
  if (!cached_) return cause.context("EC2 instance role (IMDSv2 at " + endpoint_ + ")");
  return Error(cause.code(), "EC2 instance role '" + role_ + "' (IMDSv2 at " + endpoint_ +
                                 "): the credentials expired at " +
                                 format_rfc3339(*cached_->expiration) +
                                 " and the refresh failed: " + cause.message());
}

Result<Credentials> ImdsProvider::get() {
  std::unique_lock lock(mu_);
  const WallTime now = clock_.wall_now();
  const bool valid = cached_ && now < *cached_->expiration;
  if (valid && now < *cached_->expiration - kRefreshWindow) return *cached_;
  if (valid && (refreshing_ || now < next_attempt_)) return *cached_;
  if (refreshing_) {  // nothing valid to give: wait for the refresh under way, take its outcome
    const uint64_t generation = generation_;
    refreshed_.wait(lock, [&] { return generation_ != generation; });
    if (cached_ && clock_.wall_now() < *cached_->expiration) return *cached_;
    return no_credentials_error();
  }
  refreshing_ = true;
  lock.unlock();
  Result<Fetched> fetched = fetch();
  lock.lock();
  refreshing_ = false;
  ++generation_;
  const WallTime after = clock_.wall_now();
  next_attempt_ = after + kRefreshRetryInterval;
  std::string warning;
  if (fetched.ok()) {
    ++stats_.refreshes;
    role_ = std::move(fetched->role);
    cached_ = std::move(fetched->credentials);
    last_error_.reset();
  } else {
    ++stats_.refresh_failures;
    stats_.last_failure = fetched.error().message();
    last_error_ = fetched.error();
  }
  Result<Credentials> out = Error(ErrorCode::kInternal, "");
  if (cached_ && after < *cached_->expiration) {
    out = *cached_;
    if (!fetched.ok()) {
      warning = "EC2 instance role '" + role_ + "': refresh failed, using the credentials valid " +
                "until " + format_rfc3339(*cached_->expiration) + ": " + fetched.error().message();
    }
  } else {
    out = no_credentials_error();
  }
  lock.unlock();
  refreshed_.notify_all();
  if (!warning.empty() && warn_) warn_(warning);
  return out;
}

// ---- the chain -----------------------------------------------------------------------------

Status check_value(std::string_view what, std::string_view value) {
  if (header_safe(value)) return ok_status();
  return Error(ErrorCode::kInvalid, std::string(what) +
                                        " holds a character that cannot be sent in a request "
                                        "(a space, a control character or a non-ASCII byte)");
}

Result<std::optional<Credentials>> from_environment(const CredentialSources& src) {
  const auto key = env(src, "AWS_ACCESS_KEY_ID");
  const auto secret = env(src, "AWS_SECRET_ACCESS_KEY");
  if (!key && !secret) return std::optional<Credentials>();
  if (!secret) {
    return Error(
        ErrorCode::kInvalid,
        "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not (set both, or neither)");
  }
  if (!key) {
    return Error(
        ErrorCode::kInvalid,
        "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not (set both, or neither)");
  }
  Credentials c{*key, *secret, env(src, "AWS_SESSION_TOKEN").value_or(""), std::nullopt};
  SG_RETURN_IF_ERROR(check_value("AWS_ACCESS_KEY_ID", c.access_key_id));
  SG_RETURN_IF_ERROR(check_value("AWS_SECRET_ACCESS_KEY", c.secret_access_key));
  SG_RETURN_IF_ERROR(check_value("AWS_SESSION_TOKEN", c.session_token));
  return std::optional<Credentials>(std::move(c));
}

Status refuse_role_profiles(const AwsIniSection* section, const std::string& path,
                            const std::string& profile) {
  if (section == nullptr) return ok_status();
  for (const auto& [key, entry] : section->keys) {
    if (auto kind = refused_kind(key)) {
      return ini_error(path, entry.line,
                       "profile '" + profile + "' sets " + key + ": " + std::string(*kind) +
                           " profiles are not supported: " + kAssumeRoleHint);
    }
  }
  return ok_status();
}

Result<Credentials> credentials_of(const AwsIniSection& s, const std::string& path,
                                   const std::string& profile) {
  auto value = [&](const char* key) -> std::optional<AwsIniEntry> {
    auto it = s.keys.find(key);
    if (it == s.keys.end()) return std::nullopt;
    return it->second;
  };
  const std::string where = "profile '" + profile + "'";
  const auto key = value("aws_access_key_id");
  const auto secret = value("aws_secret_access_key");
  if (!key || !secret) {
    return ini_error(path, s.line,
                     where + " has " +
                         (key ? "aws_access_key_id but no aws_secret_access_key"
                              : "aws_secret_access_key but no aws_access_key_id"));
  }
  Credentials c{key->value, secret->value, "", std::nullopt};
  if (auto token = value("aws_session_token")) c.session_token = token->value;
  if (c.access_key_id.empty()) {
    return ini_error(path, key->line, "aws_access_key_id of " + where + " is empty");
  }
  if (c.secret_access_key.empty()) {
    return ini_error(path, secret->line, "aws_secret_access_key of " + where + " is empty");
  }
  Status ok = check_value("aws_access_key_id", c.access_key_id);
  if (ok.ok()) ok = check_value("aws_secret_access_key", c.secret_access_key);
  if (ok.ok()) ok = check_value("aws_session_token", c.session_token);
  if (!ok.ok()) return ini_error(path, s.line, where + ": " + ok.error().message());
  return c;
}

struct ProfileCredentials {
  Credentials credentials;
  std::string source;
};

Result<std::optional<ProfileCredentials>> from_profile(const CredentialSources& src,
                                                       std::vector<std::string>& tried) {
  const ProfilePaths p = profile_paths(src);
  SG_ASSIGN_OR_RETURN(const auto creds_file, load_ini(src, p.credentials));
  SG_ASSIGN_OR_RETURN(const auto config_file, load_ini(src, p.config));
  const AwsIniSection* in_creds = find_section(creds_file, p.profile);
  const AwsIniSection* in_config =
      config_file ? find_config_profile(*config_file, p.profile) : nullptr;
  const std::string files = (p.credentials.empty() ? "(no credentials file)" : p.credentials) +
                            " or " + (p.config.empty() ? "(no config file)" : p.config);
  if (in_creds == nullptr && in_config == nullptr) {
    if (p.explicit_profile) {
      return Error(ErrorCode::kNotFound,
                   "AWS_PROFILE is '" + p.profile + "' but no such profile is in " + files);
    }
    tried.push_back("profile '" + p.profile + "' (not in " + files + ")");
    return std::optional<ProfileCredentials>();
  }
  SG_RETURN_IF_ERROR(refuse_role_profiles(in_creds, p.credentials, p.profile));
  SG_RETURN_IF_ERROR(refuse_role_profiles(in_config, p.config, p.profile));
  auto has_keys = [](const AwsIniSection* s) {
    return s != nullptr &&
           (s->keys.count("aws_access_key_id") != 0 || s->keys.count("aws_secret_access_key") != 0);
  };
  const AwsIniSection* chosen = has_keys(in_creds)    ? in_creds
                                : has_keys(in_config) ? in_config
                                                      : nullptr;
  if (chosen == nullptr) {
    tried.push_back("profile '" + p.profile + "' (no aws_access_key_id in " + files + ")");
    return std::optional<ProfileCredentials>();
  }
  const std::string& path = chosen == in_creds ? p.credentials : p.config;
  SG_ASSIGN_OR_RETURN(Credentials c, credentials_of(*chosen, path, p.profile));
  return std::optional<ProfileCredentials>(
      ProfileCredentials{std::move(c), "profile '" + p.profile + "' in " + path});
}

Result<std::string> imds_endpoint(const CredentialSources& src) {
  const auto set = env(src, "AWS_EC2_METADATA_SERVICE_ENDPOINT");
  std::string e = set.value_or(kDefaultImdsEndpoint);
  while (!e.empty() && e.back() == '/') e.pop_back();
  const size_t scheme = e.rfind("http://", 0) == 0 ? 7 : e.rfind("https://", 0) == 0 ? 8 : 0;
  if (scheme == 0 || e.size() == scheme || !header_safe(e)) {
    return Error(ErrorCode::kInvalid, "AWS_EC2_METADATA_SERVICE_ENDPOINT '" + printable(e, 100) +
                                          "' is not an http:// or https:// URL");
  }
  return e;
}

Status check_region(std::string_view what, std::string_view region) {
  const bool ok =
      !region.empty() && region.size() <= 64 &&
      region.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") == std::string_view::npos;
  if (ok) return ok_status();
  return Error(ErrorCode::kInvalid, std::string(what) + " '" + printable(region, 64) +
                                        "' is not a region name (like us-east-1)");
}

}  // namespace

std::string describe(const Credentials& credentials) {
  return credentials.access_key_id.substr(0, 4) + "****";
}

Result<AwsIniFile> parse_aws_ini(std::string_view text, std::string_view path) {
  if (text.size() > kMaxAwsConfigFileBytes) {
    return Error(ErrorCode::kInvalid, std::string(path) + ": larger than " +
                                          std::to_string(kMaxAwsConfigFileBytes >> 20) + " MiB");
  }
  AwsIniFile file;
  AwsIniSection* section = nullptr;
  std::string section_name;
  AwsIniEntry* value = nullptr;  // the value that indented lines continue
  size_t value_indent = 0;
  int line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    const std::string_view body = trim(line);
    if (body.empty()) {
      value = nullptr;
      continue;
    }
    if (body[0] == '#' || body[0] == ';') continue;
    const size_t indent = line.find_first_not_of(" \t");
    if (value != nullptr && indent > value_indent) {
      value->value += "\n" + std::string(body);  // botocore: a nested "s3 =" block, or a wrap
      continue;
    }
    value = nullptr;
    if (body[0] == '[') {
      const size_t close = body.rfind(']');
      const std::string_view rest =
          close == std::string_view::npos ? "" : trim(body.substr(close + 1));
      if (close == std::string_view::npos || close == 1 ||
          (!rest.empty() && rest[0] != '#' && rest[0] != ';')) {
        return ini_error(path, line_no, "a section header must be '[name]'");
      }
      section_name = std::string(body.substr(1, close - 1));
      auto [it, fresh] = file.try_emplace(section_name, AwsIniSection{line_no, {}});
      if (!fresh) {
        return ini_error(path, line_no,
                         "section [" + printable(section_name, 100) + "] again (first at line " +
                             std::to_string(it->second.line) + ")");
      }
      section = &it->second;
      continue;
    }
    const size_t delimiter = body.find_first_of("=:");
    if (delimiter == std::string_view::npos || delimiter == 0) {
      return ini_error(path, line_no, "expected 'key = value' or a [section]");
    }
    if (section == nullptr) return ini_error(path, line_no, "a key outside a section");
    const std::string key = lower(trim(body.substr(0, delimiter)));
    auto [it, fresh] = section->keys.try_emplace(
        key, AwsIniEntry{std::string(trim(body.substr(delimiter + 1))), line_no});
    if (!fresh) {
      return ini_error(path, line_no,
                       "key '" + printable(key, 100) + "' of [" + printable(section_name, 100) +
                           "] again (first at line " + std::to_string(it->second.line) + ")");
    }
    value = &it->second;
    value_indent = indent;
  }
  return file;
}

Result<Credentials> parse_imds_credentials(std::string_view text) {
  if (text.size() > kMaxImdsDocumentBytes) {
    return corrupt("larger than " + std::to_string(kMaxImdsDocumentBytes >> 10) + " KiB");
  }
  json::parse_options options;
  options.max_depth = 16;
  json::basic_parser<TopLevelHandler> parser(options);
  json::error_code ec;
  try {
    const size_t used = parser.write_some(false, text.data(), text.size(), ec);
    if (!ec && used < text.size()) ec = json::error::extra_data;
  } catch (const std::exception& e) {
    return corrupt(std::string("not parsed: ") + e.what());
  }
  const TopLevelHandler& doc = parser.handler();
  if (doc.problem) return corrupt(*doc.problem);
  if (ec) return corrupt("not JSON: " + ec.message());
  auto field = [&](const char* name) -> Result<std::string> {
    auto it = doc.members.find(name);
    if (it == doc.members.end()) return corrupt(std::string("no '") + name + "'");
    if (!it->second.is_string) return corrupt(std::string("'") + name + "' is not a string");
    return it->second.text;
  };
  SG_ASSIGN_OR_RETURN(const std::string code, field("Code"));
  if (code != "Success") {
    std::string why = "Code is '" + printable(code, 64) + "', not 'Success'";
    if (auto m = field("Message"); m.ok()) why += ": " + printable(*m, 200);
    return corrupt(std::move(why));
  }
  Credentials c;
  for (auto [name, out] :
       {std::pair{"AccessKeyId", &c.access_key_id},
        std::pair{"SecretAccessKey", &c.secret_access_key}, std::pair{"Token", &c.session_token}}) {
    SG_ASSIGN_OR_RETURN(*out, field(name));
    if (out->empty()) return corrupt(std::string("'") + name + "' is empty");
    if (!header_safe(*out)) {
      return corrupt(std::string("'") + name + "' holds a character that cannot be sent");
    }
  }
  SG_ASSIGN_OR_RETURN(const std::string expiration, field("Expiration"));
  Result<WallTime> when = parse_rfc3339(expiration);  // clamped to what a WallTime holds
  if (when.ok()) c.expiration = *when;
  if (!when.ok()) {
    return corrupt("'Expiration' is not an RFC 3339 time: '" + printable(expiration, 40) + "'");
  }
  return c;
}

std::unique_ptr<CredentialsProvider> make_static_provider(Credentials credentials,
                                                          std::string source) {
  return std::make_unique<StaticProvider>(std::move(credentials), std::move(source));
}

Result<std::unique_ptr<CredentialsProvider>> resolve_credentials(const CredentialSources& src) {
  std::vector<std::string> tried;
  SG_ASSIGN_OR_RETURN(auto from_env, from_environment(src));
  if (from_env) return make_static_provider(std::move(*from_env), "environment");
  tried.push_back("environment (no AWS_ACCESS_KEY_ID)");

  SG_ASSIGN_OR_RETURN(auto profile, from_profile(src, tried));
  if (profile) return make_static_provider(std::move(profile->credentials), profile->source);

  if (lower(env(src, "AWS_EC2_METADATA_DISABLED").value_or("")) == "true") {
    tried.push_back("EC2 instance role (AWS_EC2_METADATA_DISABLED=true)");
  } else {
    SG_ASSIGN_OR_RETURN(std::string endpoint, imds_endpoint(src));
    if (src.http == nullptr || src.clock == nullptr) {
      return Error(ErrorCode::kInternal, "credentials: no HTTP transport or clock for the IMDS");
    }
    auto imds = std::make_unique<ImdsProvider>(endpoint, *src.http, *src.clock, src.warn);
    Result<Credentials> first = imds->get();
    if (first.ok()) return std::unique_ptr<CredentialsProvider>(std::move(imds));
    tried.push_back(first.error().message());
  }
  std::string message = "no AWS credentials found; tried ";
  for (size_t i = 0; i < tried.size(); ++i) message += (i == 0 ? "" : "; ") + tried[i];
  return Error(ErrorCode::kNotFound, std::move(message));
}

Result<std::optional<std::string>> resolve_region(const CredentialSources& src) {
  for (const char* name : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (auto v = env(src, name)) {
      SG_RETURN_IF_ERROR(check_region(name, *v));
      return std::optional<std::string>(*v);
    }
  }
  const ProfilePaths p = profile_paths(src);
  SG_ASSIGN_OR_RETURN(const auto config, load_ini(src, p.config));
  const AwsIniSection* s = config ? find_config_profile(*config, p.profile) : nullptr;
  if (s == nullptr || s->keys.count("region") == 0) return std::optional<std::string>();
  const auto it = s->keys.find("region");
  SG_RETURN_IF_ERROR(check_region(p.config + ":" + std::to_string(it->second.line) + ": region",
                                  it->second.value));
  return std::optional<std::string>(it->second.value);
}

CredentialSources CredentialSources::system(HttpTransport& http) {
  CredentialSources s;
  s.getenv = [](std::string_view name) -> std::optional<std::string> {
    const char* v = ::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
  if (const char* home = ::getenv("HOME"); home != nullptr && *home != '\0') {
    s.home_dir = home;
  } else {
    passwd pw{};
    passwd* found = nullptr;
    std::vector<char> buf(16384);
    if (::getpwuid_r(::getuid(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
      s.home_dir = found->pw_dir;
    }
  }
  s.read_file = [](const std::string& path) -> Result<std::string> {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Error::from_errno("open '" + path + "'", errno);
    std::string text;
    char buf[8192];
    while (text.size() <= kMaxAwsConfigFileBytes) {
      const size_t want = std::min(sizeof buf, kMaxAwsConfigFileBytes + 1 - text.size());
      const ssize_t n = ::read(fd, buf, want);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        ::close(fd);
        return Error::from_errno("read '" + path + "'", err);
      }
      if (n == 0) break;
      text.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return text;
  };
  s.http = &http;
  s.clock = &RealClock::instance();
  return s;
}

}  // namespace shardguard::storage::s3
