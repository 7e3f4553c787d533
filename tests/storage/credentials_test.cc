// The credentials chain (storage/s3/credentials.h) against a fake environment, fake files and
// a fake IMDS transport, with FakeClock driving expiry; no network, no sleeping for time.
#include "storage/s3/credentials.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <deque>
#include <future>
#include <mutex>
#include <ostream>
#include <thread>
#include <type_traits>

#include "tests/support/temp_dir.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::storage;
using namespace shardguard::storage::s3;

namespace {

constexpr char kKey[] = "AKIAIOSFODNN7EXAMPLE";
constexpr char kSecret[] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
constexpr char kToken[] = "IQoJb3JpZ2luX2VjEXAMPLETOKEN+session/token==";
constexpr char kImdsToken[] = "AQAEAimds-token-secret";
constexpr char kRolePath[] = "/latest/meta-data/iam/security-credentials/sg-role";

// Fails the test if `text` holds any secret the tests use (every generation of them).
void check_no_secret(const std::string& text) {
  for (const char* secret : {kSecret, kToken, kImdsToken, "imds-secret-", "imds-token-"}) {
    INFO(text);
    CHECK(text.find(secret) == std::string::npos);
  }
}

std::string imds_doc(int generation, WallTime expiration) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(expiration);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  const std::string n = std::to_string(generation);
  return R"({"Code": "Success", "LastUpdated": "2023-11-14T22:00:00Z", "Type": "AWS-HMAC",
             "AccessKeyId": "ASIAIMDS)" +
         n + R"(", "SecretAccessKey": "imds-secret-)" + n + R"(", "Token": "imds-token-)" + n +
         R"(", "Expiration": ")" + when + "\"}";
}

struct Recorded {
  std::string method, path;
  std::vector<HttpHeader> headers;
  Duration timeout{}, connect_timeout{};
  std::optional<std::string> header(std::string_view name) const {
    for (const auto& h : headers)
      if (h.name == name) return h.value;
    return std::nullopt;
  }
};

// Scripted answers keyed by "METHOD /path": a queue whose last answer repeats. Unscripted
// requests answer 404. Thread-safe; `before_answer` runs outside the lock.
class FakeImds final : public HttpTransport {
 public:
  void script(const std::string& key, Result<HttpResponse> answer) {
    std::lock_guard lock(mu_);
    answers_[key].push_back(std::move(answer));
  }
  void answer(const std::string& key, int status, std::string body) {
    HttpResponse r;
    r.status = status;
    r.body = std::move(body);
    script(key, std::move(r));
  }
  // Replaces the queue of `key` with one answer.
  void set(const std::string& key, int status, std::string body) {
    {
      std::lock_guard lock(mu_);
      answers_[key].clear();
    }
    answer(key, status, std::move(body));
  }
  // A working IMDS with role sg-role whose credentials are `generation`.
  void serve_role(int generation, WallTime expiration) {
    set("PUT /latest/api/token", 200, kImdsToken);
    set("GET /latest/meta-data/iam/security-credentials/", 200, "sg-role\n");
    set(std::string("GET ") + kRolePath, 200, imds_doc(generation, expiration));
  }

  Result<HttpResponse> perform(const HttpRequest& request) override {
    const size_t host = request.url.find("://") + 3;
    Recorded rec{request.method, request.url.substr(request.url.find('/', host)), request.headers,
                 request.timeout, request.connect_timeout};
    const std::string key = rec.method + " " + rec.path;
    if (before_answer) before_answer(key);
    std::lock_guard lock(mu_);
    requests_.push_back(std::move(rec));
    auto it = answers_.find(key);
    if (it == answers_.end() || it->second.empty()) {
      HttpResponse r;
      r.status = 404;
      return r;
    }
    Result<HttpResponse> a = it->second.front();
    if (it->second.size() > 1) it->second.pop_front();
    return a;
  }

  std::vector<Recorded> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  size_t count(const std::string& key) const {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const auto& r : requests_) n += r.method + " " + r.path == key;
    return n;
  }

  std::function<void(const std::string&)> before_answer;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::deque<Result<HttpResponse>>> answers_;
  std::vector<Recorded> requests_;
};

// A fake machine: environment, files under /home/u, the IMDS, the clock.
struct World {
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> files;
  FakeImds imds;
  FakeClock clock;
  std::mutex warn_mu;
  std::vector<std::string> warnings;

  CredentialSources sources() {
    CredentialSources s;
    s.getenv = [this](std::string_view name) -> std::optional<std::string> {
      auto it = env.find(std::string(name));
      if (it == env.end()) return std::nullopt;
      return it->second;
    };
    s.home_dir = "/home/u";
    s.read_file = [this](const std::string& path) -> Result<std::string> {
      auto it = files.find(path);
      if (it == files.end()) return Error(ErrorCode::kNotFound, "no file '" + path + "'");
      return it->second;
    };
    s.http = &imds;
    s.clock = &clock;
    s.warn = [this](std::string_view m) {
      std::lock_guard lock(warn_mu);
      warnings.emplace_back(m);
    };
    return s;
  }
  Result<std::unique_ptr<CredentialsProvider>> resolve() { return resolve_credentials(sources()); }
  std::string resolve_error() {
    auto r = resolve();
    REQUIRE_FALSE(r.ok());
    check_no_secret(r.error().message());
    return r.error().message();
  }
  void set_env_keys() {
    env["AWS_ACCESS_KEY_ID"] = kKey;
    env["AWS_SECRET_ACCESS_KEY"] = kSecret;
  }
};

constexpr char kCredentialsPath[] = "/home/u/.aws/credentials";
constexpr char kConfigPath[] = "/home/u/.aws/config";

std::string static_profile(const std::string& header) {
  return "[" + header + "]\naws_access_key_id = " + kKey + "\naws_secret_access_key = " + kSecret +
         "\n";
}

std::string lower_key(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

template <typename T, typename = void>
struct Streamable : std::false_type {};
template <typename T>
struct Streamable<T, std::void_t<decltype(std::declval<std::ostream&>() << std::declval<T>())>>
    : std::true_type {};

}  // namespace

// ---- environment ----------------------------------------------------------------------------

TEST_CASE("credentials: environment keys, with and without a session token") {
  World w;
  w.set_env_keys();
  const bool with_token = GENERATE(false, true);
  if (with_token) w.env["AWS_SESSION_TOKEN"] = kToken;
  auto p = w.resolve();
  REQUIRE(p.ok());
  CHECK((*p)->source() == "environment");
  auto c = (*p)->get();
  REQUIRE(c.ok());
  CHECK(c->access_key_id == kKey);
  CHECK(c->secret_access_key == kSecret);
  CHECK(c->session_token == (with_token ? kToken : ""));
  CHECK_FALSE(c->expiration.has_value());
  CHECK(w.imds.requests().empty());
}

TEST_CASE("credentials: one environment key without the other names the missing variable") {
  World w;
  w.files[kCredentialsPath] = static_profile("default");  // not a fallback: the error stops
  const bool key_only = GENERATE(true, false);
  w.env[key_only ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY"] = key_only ? kKey : kSecret;
  const std::string message = w.resolve_error();
  CHECK_THAT(message, Catch::Contains(key_only ? "AWS_SECRET_ACCESS_KEY is not"
                                               : "AWS_ACCESS_KEY_ID is not"));
  CHECK(w.imds.requests().empty());
}

TEST_CASE("credentials: an empty environment variable counts as unset") {
  World w;
  w.env["AWS_ACCESS_KEY_ID"] = "";
  w.env["AWS_SECRET_ACCESS_KEY"] = "";
  w.files[kCredentialsPath] = static_profile("default");
  auto p = w.resolve();
  REQUIRE(p.ok());
  CHECK((*p)->source() == std::string("profile 'default' in ") + kCredentialsPath);
}

TEST_CASE("credentials: a value that cannot go in a header is refused without echoing it") {
  World w;
  w.set_env_keys();
  w.env["AWS_SECRET_ACCESS_KEY"] = std::string(kSecret) + " \r\nX-Injected: 1";
  const std::string message = w.resolve_error();
  CHECK_THAT(message, Catch::Contains("AWS_SECRET_ACCESS_KEY holds a character"));
  CHECK_THAT(message, !Catch::Contains("Injected"));
}

// ---- the order of the chain ----------------------------------------------------------------

TEST_CASE("credentials: environment beats profile beats instance role") {
  World w;
  w.imds.serve_role(1, w.clock.wall_now() + 6h);
  w.files[kCredentialsPath] =
      "[default]\naws_access_key_id = AKIAPROFILE\n"
      "aws_secret_access_key = profile-secret\n";
  SECTION("all three: the environment, and the IMDS is not asked") {
    w.set_env_keys();
    auto p = w.resolve();
    REQUIRE(p.ok());
    CHECK((*p)->source() == "environment");
    CHECK(w.imds.requests().empty());
  }
  SECTION("profile and instance role: the profile") {
    auto p = w.resolve();
    REQUIRE(p.ok());
    CHECK((*p)->source() == std::string("profile 'default' in ") + kCredentialsPath);
    CHECK((*p)->get()->access_key_id == "AKIAPROFILE");
    CHECK(w.imds.requests().empty());
  }
  SECTION("only the instance role") {
    w.files.clear();
    auto p = w.resolve();
    REQUIRE(p.ok());
    CHECK((*p)->source() == "EC2 instance role 'sg-role' (IMDSv2)");
    CHECK((*p)->get()->access_key_id == "ASIAIMDS1");
  }
  SECTION("a default profile without keys (config: region only) falls through to the role") {
    w.files.clear();
    w.files[kConfigPath] = "[default]\nregion = eu-west-1\noutput = json\n";
    auto p = w.resolve();
    REQUIRE(p.ok());
    CHECK((*p)->source() == "EC2 instance role 'sg-role' (IMDSv2)");
  }
}

TEST_CASE("credentials: nothing anywhere is one error listing what was tried") {
  World w;
  const bool disabled = GENERATE(false, true);
  if (disabled) w.env["AWS_EC2_METADATA_DISABLED"] = "True";
  auto r = w.resolve();
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == ErrorCode::kNotFound);
  const std::string& m = r.error().message();
  CHECK_THAT(m, Catch::StartsWith("no AWS credentials found; tried environment"));
  CHECK_THAT(m, Catch::Contains("profile 'default' (not in /home/u/.aws/credentials or "
                                "/home/u/.aws/config)"));
  if (disabled) {
    CHECK_THAT(m, Catch::Contains("EC2 instance role (AWS_EC2_METADATA_DISABLED=true)"));
    CHECK(w.imds.requests().empty());  // not a single request
  } else {
    // The fake answers 404 to the token PUT: named with the endpoint and the answer.
    CHECK_THAT(m, Catch::Contains("EC2 instance role (IMDSv2 at http://169.254.169.254): PUT "
                                  "http://169.254.169.254/latest/api/token: HTTP 404"));
  }
}

// ---- profiles -------------------------------------------------------------------------------

TEST_CASE("credentials: a profile in the credentials file, with comments and odd spacing") {
  World w;
  w.env["AWS_PROFILE"] = "dev";
  w.files[kCredentialsPath] = std::string("# my keys\r\n") +
                              "; another comment\n"
                              "\n"
                              "[default]\n"
                              "aws_access_key_id=AKIADEFAULT\n"
                              "aws_secret_access_key=default-secret\n"
                              "\n"
                              "[dev]   # the dev account\n"
                              "   # indented comment\n"
                              "  AWS_Access_Key_ID   =" +
                              kKey +
                              "   \r\n"
                              "aws_secret_access_key:   " +
                              kSecret +
                              "\n"
                              "\t\n"
                              "aws_session_token\t=\t" +
                              kToken + "\n";
  auto p = w.resolve();
  REQUIRE(p.ok());
  CHECK((*p)->source() == std::string("profile 'dev' in ") + kCredentialsPath);
  auto c = (*p)->get();
  REQUIRE(c.ok());
  CHECK(c->access_key_id == kKey);
  CHECK(c->secret_access_key == kSecret);
  CHECK(c->session_token == kToken);
  check_no_secret((*p)->source());
}

TEST_CASE("credentials: a profile in the config file, [profile name] and [default]") {
  World w;
  SECTION("[profile dev]") {
    w.env["AWS_PROFILE"] = "dev";
    w.files[kConfigPath] = "[default]\nregion = us-east-1\n\n" + static_profile("profile dev");
    auto p = w.resolve();
    REQUIRE(p.ok());
    CHECK((*p)->source() == std::string("profile 'dev' in ") + kConfigPath);
    CHECK((*p)->get()->secret_access_key == kSecret);
  }
  SECTION("[default]") {
    w.files[kConfigPath] = static_profile("default");
    auto p = w.resolve();
    REQUIRE(p.ok());
    CHECK((*p)->source() == std::string("profile 'default' in ") + kConfigPath);
  }
  SECTION("[dev] in the config file is not profile dev (and [profile dev] in credentials)") {
    w.env["AWS_PROFILE"] = "dev";
    w.files[kConfigPath] = static_profile("dev");
    w.files[kCredentialsPath] = static_profile("profile dev");
    CHECK_THAT(w.resolve_error(), Catch::Contains("AWS_PROFILE is 'dev'"));
  }
  SECTION("the credentials file wins over the config file") {
    w.files[kConfigPath] = static_profile("default");
    w.files[kCredentialsPath] =
        "[default]\naws_access_key_id = AKIAFROMCREDS\n"
        "aws_secret_access_key = other\n";
    auto p = w.resolve();
    REQUIRE(p.ok());
    CHECK((*p)->get()->access_key_id == "AKIAFROMCREDS");
  }
}

TEST_CASE("credentials: AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE, '~' expanded") {
  World w;
  w.env["AWS_SHARED_CREDENTIALS_FILE"] = "~/keys/creds";
  w.env["AWS_CONFIG_FILE"] = "/etc/aws/config";
  w.env["AWS_PROFILE"] = "ci";
  SECTION("credentials file") {
    w.files["/home/u/keys/creds"] = static_profile("ci");
    w.files[kCredentialsPath] = static_profile("ci");  // the default location is not read
    auto p = w.resolve();
    REQUIRE(p.ok());
    CHECK((*p)->source() == "profile 'ci' in /home/u/keys/creds");
  }
  SECTION("config file") {
    w.files["/etc/aws/config"] = static_profile("profile ci");
    auto p = w.resolve();
    REQUIRE(p.ok());
    CHECK((*p)->source() == "profile 'ci' in /etc/aws/config");
  }
}

TEST_CASE("credentials: an AWS_PROFILE in neither file names the profile and both files") {
  World w;
  w.env["AWS_PROFILE"] = "prod";
  w.files[kCredentialsPath] = static_profile("default");
  w.imds.serve_role(1, w.clock.wall_now() + 6h);  // not a fallback for a named profile
  auto r = w.resolve();
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == ErrorCode::kNotFound);
  CHECK(r.error().message() ==
        "AWS_PROFILE is 'prod' but no such profile is in /home/u/.aws/credentials or "
        "/home/u/.aws/config");
  CHECK(w.imds.requests().empty());
}

TEST_CASE("credentials: assume-role, SSO and credential_process profiles are refused") {
  World w;
  w.env["AWS_PROFILE"] = "ops";
  const std::string key =
      GENERATE(as<std::string>{}, "role_arn", "Source_Profile", "credential_source",
               "web_identity_token_file", "credential_process", "sso_start_url", "sso_session");
  const bool in_config = GENERATE(false, true);
  const std::string body = "# keys below\n[" + std::string(in_config ? "profile ops" : "ops") +
                           "]\naws_access_key_id = " + kKey +
                           "\naws_secret_access_key = " + kSecret + "\n" + key +
                           " = arn:aws:iam::123456789012:role/x\n";
  w.files[in_config ? kConfigPath : kCredentialsPath] = body;
  w.imds.serve_role(1, w.clock.wall_now() + 6h);
  const std::string message = w.resolve_error();
  const std::string file = in_config ? kConfigPath : kCredentialsPath;
  CHECK_THAT(message, Catch::StartsWith(file + ":5: profile 'ops' sets " + lower_key(key)));
  CHECK_THAT(message,
             Catch::EndsWith("profiles are not supported: export the credentials or use the "
                             "instance role"));
  if (key == "role_arn") CHECK_THAT(message, Catch::Contains("assume-role profiles"));
  CHECK(w.imds.requests().empty());
}

TEST_CASE("credentials: a profile with one key of two names the file, profile and missing key") {
  World w;
  w.files[kCredentialsPath] = "\n[default]\naws_secret_access_key = " + std::string(kSecret) + "\n";
  CHECK(w.resolve_error() == std::string(kCredentialsPath) +
                                 ":2: profile 'default' has aws_secret_access_key but no "
                                 "aws_access_key_id");
  w.files[kCredentialsPath] = "[default]\naws_access_key_id = AKIA\naws_secret_access_key =\n";
  CHECK(w.resolve_error() ==
        std::string(kCredentialsPath) + ":3: aws_secret_access_key of profile 'default' is empty");
}

TEST_CASE("credentials: a file that does not parse stops the chain with file and line") {
  World w;
  w.files[kConfigPath] = "[default]\nregion = us-east-1\n" + std::string(kSecret) + "\n";
  w.imds.serve_role(1, w.clock.wall_now() + 6h);
  CHECK(w.resolve_error() ==
        std::string(kConfigPath) + ":3: expected 'key = value' or a [section]");
  CHECK(w.imds.requests().empty());
}

TEST_CASE("credentials: an unreadable file is an error naming it; a missing one is skipped") {
  World w;
  CredentialSources s = w.sources();
  s.read_file = [](const std::string& path) -> Result<std::string> {
    if (path == kConfigPath) return Error(ErrorCode::kIo, "Permission denied", 13);
    return Error(ErrorCode::kNotFound, "missing");
  };
  auto r = resolve_credentials(s);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message() == "read '/home/u/.aws/config': Permission denied");
}

// ---- the INI format -------------------------------------------------------------------------

TEST_CASE("aws ini: keys case-insensitive, sections as written, ':' and continuation lines") {
  auto f = parse_aws_ini(
      "[Default]\nRegion: eu-west-1\ns3 =\n  max_concurrent_requests = 20\n"
      "  addressing_style = path\nempty =\n[profile  x]\nk=v=w\n",
      "cfg");
  REQUIRE(f.ok());
  REQUIRE(f->count("Default") == 1);
  CHECK(f->count("default") == 0);
  const auto& keys = f->at("Default").keys;
  CHECK(keys.at("region").value == "eu-west-1");
  CHECK(keys.at("region").line == 2);
  CHECK(keys.at("s3").value == "\nmax_concurrent_requests = 20\naddressing_style = path");
  CHECK(keys.at("empty").value.empty());
  CHECK(f->at("profile  x").keys.at("k").value == "v=w");
  // Indented like its neighbours: a key, not a continuation.
  auto g = parse_aws_ini("[a]\n  k1 = 1\n  k2 = 2\n", "cfg");
  REQUIRE(g.ok());
  CHECK(g->at("a").keys.size() == 2);
}

TEST_CASE("aws ini: errors name file and line, never the line's text") {
  struct Bad {
    std::string text;
    std::string message;
  };
  const std::string s = kSecret;
  const Bad bad = GENERATE_COPY(
      Bad{"aws_secret_access_key = " + s + "\n", "creds:1: a key outside a section"},
      Bad{"# c\n\n" + s + " = x\n", "creds:3: a key outside a section"},
      Bad{"[a]\n" + s + "\n", "creds:2: expected 'key = value' or a [section]"},
      Bad{"[a]\n= " + s + "\n", "creds:2: expected 'key = value' or a [section]"},
      Bad{"[a\n", "creds:1: a section header must be '[name]'"},
      Bad{"[]\n", "creds:1: a section header must be '[name]'"},
      Bad{"[a] " + s + "\n", "creds:1: a section header must be '[name]'"},
      Bad{"[a]\n[b]\n[a]\n", "creds:3: section [a] again (first at line 1)"},
      Bad{"[a]\nK = " + s + "\nk = 2\n", "creds:3: key 'k' of [a] again (first at line 2)"});
  auto r = parse_aws_ini(bad.text, "creds");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == ErrorCode::kInvalid);
  CHECK(r.error().message() == bad.message);
  check_no_secret(r.error().message());
}

TEST_CASE("aws ini: a file over the size limit is refused") {
  const std::string big = "[a]\n" + std::string(kMaxAwsConfigFileBytes, '#');
  auto r = parse_aws_ini(big, "/x/config");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message() == "/x/config: larger than 1 MiB");
}

TEST_CASE("credentials: the system sources read real files, bounded; a missing one is kNotFound") {
  testing::TempDir dir;
  testing::spit(dir / "creds", static_profile("default"));
  testing::spit(dir / "big", std::string(kMaxAwsConfigFileBytes + 100, '#'));
  FakeImds imds;
  const CredentialSources s = CredentialSources::system(imds);
  CHECK(s.read_file(dir / "creds").value() == static_profile("default"));
  CHECK(s.read_file(dir / "big")->size() == kMaxAwsConfigFileBytes + 1);
  auto missing = s.read_file(dir / "nope");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code() == ErrorCode::kNotFound);
  CHECK_FALSE(s.home_dir.empty());
  CHECK(s.getenv("SG_SURELY_UNSET_VARIABLE") == std::nullopt);
}

// ---- the instance role ----------------------------------------------------------------------

TEST_CASE("imds: the token is fetched and sent, the role listed, the credentials parsed") {
  World w;
  const WallTime expiration = w.clock.wall_now() + 6h;
  w.imds.serve_role(1, expiration);
  auto p = w.resolve();
  REQUIRE(p.ok());
  CHECK((*p)->source() == "EC2 instance role 'sg-role' (IMDSv2)");
  auto c = (*p)->get();
  REQUIRE(c.ok());
  CHECK(c->access_key_id == "ASIAIMDS1");
  CHECK(c->secret_access_key == "imds-secret-1");
  CHECK(c->session_token == "imds-token-1");
  CHECK(c->expiration == std::chrono::time_point_cast<std::chrono::seconds>(expiration));
  const auto rs = w.imds.requests();
  REQUIRE(rs.size() == 3);
  CHECK(rs[0].method == "PUT");
  CHECK(rs[0].path == "/latest/api/token");
  CHECK(rs[0].header("X-aws-ec2-metadata-token-ttl-seconds") == "21600");
  CHECK(rs[1].path == "/latest/meta-data/iam/security-credentials/");
  CHECK(rs[2].path == kRolePath);
  for (size_t i = 1; i < 3; ++i) {
    CHECK(rs[i].method == "GET");
    CHECK(rs[i].header("X-aws-ec2-metadata-token") == kImdsToken);
  }
  for (const auto& r : rs) {
    CHECK(r.connect_timeout == 1s);
    CHECK(r.timeout == 2s);
  }
  CHECK((*p)->stats().refreshes == 1);
  check_no_secret((*p)->source());
  CHECK(describe(*c) == "ASIA****");
}

TEST_CASE("imds: AWS_EC2_METADATA_SERVICE_ENDPOINT is used; a bad one is an error") {
  World w;
  w.imds.serve_role(1, w.clock.wall_now() + 6h);
  SECTION("with a trailing slash") {
    std::vector<std::string> urls;
    w.env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = "http://127.0.0.1:8111/";
    CredentialSources s = w.sources();
    struct Spy final : HttpTransport {
      HttpTransport* inner;
      std::vector<std::string>* urls;
      Result<HttpResponse> perform(const HttpRequest& r) override {
        urls->push_back(r.url);
        return inner->perform(r);
      }
    } spy;
    spy.inner = &w.imds;
    spy.urls = &urls;
    s.http = &spy;
    REQUIRE(resolve_credentials(s).ok());
    REQUIRE(urls.size() == 3);
    CHECK(urls[0] == "http://127.0.0.1:8111/latest/api/token");
  }
  SECTION("not a URL") {
    w.env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = "169.254.169.254";
    CHECK_THAT(w.resolve_error(), Catch::Contains("AWS_EC2_METADATA_SERVICE_ENDPOINT "
                                                  "'169.254.169.254' is not an http://"));
    CHECK(w.imds.requests().empty());
  }
}

TEST_CASE("imds: refresh only within 5 minutes of expiry") {
  World w;
  const WallTime expiration = w.clock.wall_now() + 1h;
  w.imds.serve_role(1, expiration);
  auto p = w.resolve();
  REQUIRE(p.ok());
  w.imds.serve_role(2, expiration + 1h);
  w.clock.advance(55min - 1s);  // 5 min 1 s before expiry: the cache
  CHECK((*p)->get()->access_key_id == "ASIAIMDS1");
  CHECK(w.imds.count(std::string("GET ") + kRolePath) == 1);
  w.clock.advance(1s);  // exactly 5 minutes before: a refresh
  CHECK((*p)->get()->access_key_id == "ASIAIMDS2");
  CHECK(w.imds.count(std::string("GET ") + kRolePath) == 2);
  CHECK(w.imds.count("PUT /latest/api/token") == 2);
  CHECK((*p)->get()->access_key_id == "ASIAIMDS2");  // and then the new cache
  CHECK(w.imds.count(std::string("GET ") + kRolePath) == 2);
  CHECK((*p)->stats().refreshes == 2);
  CHECK((*p)->stats().refresh_failures == 0);
}

TEST_CASE("imds: a failed refresh while the cache is valid returns the cache and records it") {
  World w;
  const WallTime expiration = w.clock.wall_now() + 1h;
  w.imds.serve_role(1, expiration);
  auto p = w.resolve();
  REQUIRE(p.ok());
  w.imds.set(std::string("GET ") + kRolePath, 500, "internal error");
  w.clock.advance(57min);
  auto c = (*p)->get();
  REQUIRE(c.ok());
  CHECK(c->access_key_id == "ASIAIMDS1");
  CHECK(w.imds.count(std::string("GET ") + kRolePath) == 1 + kImdsAttempts);
  const CredentialsStats stats = (*p)->stats();
  CHECK(stats.refresh_failures == 1);
  CHECK_THAT(stats.last_failure, Catch::Contains("GET http://169.254.169.254"
                                                 "/latest/meta-data/iam/security-credentials/"
                                                 "sg-role: HTTP 500 (3 tries)"));
  REQUIRE(w.warnings.size() == 1);
  CHECK_THAT(w.warnings[0], Catch::Contains("refresh failed, using the credentials valid until"));
  for (const auto& m : w.warnings) check_no_secret(m);
  check_no_secret(stats.last_failure);
  // No new try within the retry interval; one after it, which succeeds.
  w.clock.advance(kRefreshRetryInterval - 1s);
  CHECK((*p)->get().ok());
  CHECK(w.imds.count(std::string("GET ") + kRolePath) == 1 + kImdsAttempts);
  w.imds.serve_role(2, expiration + 1h);
  w.clock.advance(1s);
  CHECK((*p)->get()->access_key_id == "ASIAIMDS2");
  CHECK((*p)->stats().refreshes == 2);
}

TEST_CASE("imds: expired and the refresh failing is an error naming the endpoint and answer") {
  World w;
  const WallTime expiration = w.clock.wall_now() + 1h;
  w.imds.serve_role(1, expiration);
  auto p = w.resolve();
  REQUIRE(p.ok());
  w.imds.set(std::string("GET ") + kRolePath, 503, "busy");
  w.clock.advance(1h);
  auto c = (*p)->get();
  REQUIRE_FALSE(c.ok());
  CHECK(c.error().message() ==
        "EC2 instance role 'sg-role' (IMDSv2 at http://169.254.169.254): the credentials "
        "expired at 2023-11-14T23:13:20Z and the refresh failed: GET "
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/sg-role: HTTP 503 "
        "(3 tries)");
  check_no_secret(c.error().message());
  // Every call while expired tries again (nothing valid to fall back on), then recovers.
  CHECK_FALSE((*p)->get().ok());
  w.imds.serve_role(2, expiration + 1h);
  CHECK((*p)->get()->access_key_id == "ASIAIMDS2");
}

TEST_CASE("imds: 8 threads at refresh time run one refresh") {
  World w;
  const WallTime expiration = w.clock.wall_now() + 1h;
  w.imds.serve_role(1, expiration);
  auto p = w.resolve();
  REQUIRE(p.ok());
  w.imds.serve_role(2, expiration + 1h);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> blocked{0};
  w.imds.before_answer = [&](const std::string& key) {
    if (key != std::string("GET ") + kRolePath) return;
    ++blocked;
    released.wait();
  };
  const bool expired = GENERATE(false, true);
  w.clock.advance(expired ? 1h + 1s : 58min);
  std::atomic<int> done{0};
  std::vector<std::string> keys(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto c = (*p)->get();
      keys[i] = c.ok() ? c->access_key_id : "error: " + c.error().message();
      ++done;
    });
  }
  const auto until = std::chrono::steady_clock::now() + 10s;
  // Still valid: 7 threads return the cache at once while one refreshes.
  if (!expired) {
    while (done < 7 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    CHECK(done == 7);
  }
  while (blocked == 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  release.set_value();
  for (auto& t : threads) t.join();
  CHECK(blocked == 1);
  CHECK(w.imds.count(std::string("GET ") + kRolePath) == 2);
  CHECK((*p)->stats().refreshes == 2);
  const auto renewed = std::count(keys.begin(), keys.end(), "ASIAIMDS2");
  if (expired) {
    CHECK(renewed == 8);
  } else {
    CHECK(renewed == 1);
    CHECK(std::count(keys.begin(), keys.end(), "ASIAIMDS1") == 7);
  }
}

TEST_CASE("imds: the answers that are not credentials") {
  World w;
  w.imds.serve_role(1, w.clock.wall_now() + 6h);
  SECTION("no role attached (404)") {
    w.imds.set("GET /latest/meta-data/iam/security-credentials/", 404, "");
    CHECK_THAT(w.resolve_error(),
               Catch::Contains("security-credentials/: HTTP 404: no instance role is attached"));
  }
  SECTION("a role name that is not one is not put in a URL") {
    w.imds.set("GET /latest/meta-data/iam/security-credentials/", 200, "../../user-data");
    CHECK_THAT(w.resolve_error(), Catch::Contains("not an IAM role name: '../../user-data'"));
    CHECK(w.imds.requests().size() == 2);
  }
  SECTION("an expired token (401) is replaced once") {
    w.imds.set("GET /latest/meta-data/iam/security-credentials/", 401, "");
    w.imds.answer("GET /latest/meta-data/iam/security-credentials/", 200, "sg-role");
    REQUIRE(w.resolve().ok());
    CHECK(w.imds.count("PUT /latest/api/token") == 2);
  }
  SECTION("401 twice is an error") {
    w.imds.set(std::string("GET ") + kRolePath, 401, "");
    CHECK_THAT(w.resolve_error(), Catch::Contains("sg-role: HTTP 401"));
    CHECK(w.imds.count("PUT /latest/api/token") == 2);
  }
  SECTION("503 is tried again, a bounded number of times") {
    w.imds.set("PUT /latest/api/token", 503, "");
    w.imds.answer("PUT /latest/api/token", 200, kImdsToken);
    REQUIRE(w.resolve().ok());
    CHECK(w.imds.count("PUT /latest/api/token") == 2);
  }
  SECTION("a timeout on the token says why it may happen") {
    FakeImds timeouts;
    timeouts.script("PUT /latest/api/token", Error(ErrorCode::kTimeout,
                                                   "PUT http://169.254.169.254/latest/api/token: "
                                                   "timed out"));
    CredentialSources s = w.sources();
    s.http = &timeouts;
    auto r = resolve_credentials(s);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message(), Catch::Contains("hop limit of 1"));
    CHECK(timeouts.count("PUT /latest/api/token") == kImdsAttempts);
  }
  SECTION("a document that does not parse names the URL, never the body") {
    w.imds.set(std::string("GET ") + kRolePath, 200,
               R"({"Code": "Success", "AccessKeyId": "A", "SecretAccessKey": ")" +
                   std::string(kSecret) + R"(", "Token": 5, "Expiration": "x"})");
    CHECK_THAT(w.resolve_error(),
               Catch::Contains("sg-role: IMDS credentials: 'Token' is not a string"));
  }
  SECTION("credentials that are already expired") {
    w.imds.serve_role(1, w.clock.wall_now() - 1s);
    CHECK_THAT(w.resolve_error(), Catch::Contains("credentials that expired at"));
  }
}

// ---- the IMDS document ----------------------------------------------------------------------

TEST_CASE("imds document: a good one, fractions and offsets") {
  auto c = parse_imds_credentials(
      R"({"Code":"Success","AccessKeyId":"ASIA1","SecretAccessKey":"s","Token":"t",
          "Expiration":"2023-11-15T01:13:20.5+02:00","Extra":{"nested":[1,2]}})");
  REQUIRE(c.ok());
  CHECK(c->access_key_id == "ASIA1");
  CHECK(c->expiration == WallTime(std::chrono::seconds(1'700'000'000)) + 1h + 500ms);
}

TEST_CASE("imds document: strict, naming the field and never the secret") {
  struct Bad {
    std::string doc;
    std::string message;
  };
  const std::string secret = kSecret;
  auto doc = [&](const std::string& fields) {
    return R"({"Code":"Success","AccessKeyId":"ASIA1","Token":"t",)" + fields + "}";
  };
  const std::string expiration = R"("Expiration":"2030-01-01T00:00:00Z")";
  const Bad bad = GENERATE_COPY(
      Bad{"", "not JSON"}, Bad{"[1]", "not a JSON object"},
      Bad{"\"" + secret + "\"", "not a JSON object"}, Bad{"{", "not JSON"},
      Bad{doc(R"("SecretAccessKey":")" + secret + "\"," + expiration) + " x", "not JSON"},
      Bad{R"({"Code":"AssumeRoleUnauthorizedAccess","Message":"EC2 cannot assume the role"})",
          "Code is 'AssumeRoleUnauthorizedAccess', not 'Success': EC2 cannot assume the role"},
      Bad{R"({"Code":1})", "'Code' is not a string"}, Bad{doc(expiration), "no 'SecretAccessKey'"},
      Bad{doc(R"("SecretAccessKey":"",)" + expiration), "'SecretAccessKey' is empty"},
      Bad{doc(R"("SecretAccessKey":")" + secret + " x\"," + expiration),
          "'SecretAccessKey' holds a character that cannot be sent"},
      Bad{doc(R"("SecretAccessKey":")" + secret + R"(","Expiration":null)"),
          "'Expiration' is not a string"},
      Bad{doc(R"("SecretAccessKey":")" + secret + R"(","Expiration":"2030-02-30T00:00:00Z")"),
          "'Expiration' is not an RFC 3339 time: '2030-02-30T00:00:00Z'"},
      Bad{doc(R"("SecretAccessKey":")" + secret + R"(","Expiration":"2030-01-01T00:00:00")"),
          "'Expiration' is not an RFC 3339 time"},
      Bad{doc(R"("SecretAccessKey":")" + secret + R"(","Expiration":"2030-01-01T24:00:00Z")"),
          "'Expiration' is not an RFC 3339 time"},
      Bad{doc(R"("SecretAccessKey":"a","SecretAccessKey":")" + secret + "\"," + expiration),
          "duplicate key 'SecretAccessKey'"},
      Bad{doc(R"("SecretAccessKey":")" + secret + "\"," + expiration + ",\"Pad\":\"" +
              std::string(kMaxImdsDocumentBytes, 'x') + "\""),
          "larger than 64 KiB"});
  auto r = parse_imds_credentials(bad.doc);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == ErrorCode::kCorrupt);
  CHECK_THAT(r.error().message(), Catch::StartsWith("IMDS credentials: " + bad.message));
  check_no_secret(r.error().message());
}

// ---- region ---------------------------------------------------------------------------------

TEST_CASE("region: AWS_REGION, then AWS_DEFAULT_REGION, then the profile in the config file") {
  World w;
  w.files[kConfigPath] = "[default]\nregion = eu-west-1\n[profile dev]\nRegion = ap-south-1\n";
  w.files[kCredentialsPath] = "[default]\nregion = us-west-2\n";  // not read for the region
  CHECK(resolve_region(w.sources()).value() == "eu-west-1");
  w.env["AWS_PROFILE"] = "dev";
  CHECK(resolve_region(w.sources()).value() == "ap-south-1");
  w.env["AWS_DEFAULT_REGION"] = "us-east-2";
  CHECK(resolve_region(w.sources()).value() == "us-east-2");
  w.env["AWS_REGION"] = "ca-central-1";
  CHECK(resolve_region(w.sources()).value() == "ca-central-1");
  w.env.clear();
  w.env["AWS_PROFILE"] = "other";
  CHECK(resolve_region(w.sources()).value() == std::nullopt);
}

TEST_CASE("region: a value that is not a region name is an error naming where it came from") {
  World w;
  w.env["AWS_REGION"] = "US East";
  CHECK(resolve_region(w.sources()).error().message() ==
        "AWS_REGION 'US East' is not a region name (like us-east-1)");
  w.env.clear();
  w.files[kConfigPath] = "[default]\n\nregion = us-east-1/x\n";
  CHECK(resolve_region(w.sources()).error().message() ==
        "/home/u/.aws/config:3: region 'us-east-1/x' is not a region name (like us-east-1)");
}

// ---- never printed --------------------------------------------------------------------------

TEST_CASE("credentials: describe() shows 4 characters, and nothing streams a Credentials") {
  static_assert(!Streamable<const Credentials&>::value);
  Credentials c{kKey, kSecret, kToken, std::nullopt};
  CHECK(describe(c) == "AKIA****");
  CHECK(describe(Credentials{}) == "****");
  auto p = make_static_provider(c, "test");
  CHECK(p->source() == "test");
  CHECK(p->get()->secret_access_key == kSecret);
  CHECK(p->stats().refreshes == 0);
}
