// The metadata emulator itself (its wire rules, scripts, the standalone program), and cloud
// detection against it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>

#include "agent/cloud_detect.h"
#include "core/time_formats.h"
#include "io/event_loop.h"
#include "io/http_client.h"
#include "tests/agent/metadata_emulator.h"
#include "tests/support/temp_dir.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::testing;

namespace {

io::HttpResponse fetch(const std::string& method, const std::string& url,
                       io::HttpHeaders headers = {}, std::string body = "") {
  io::HttpRequest r;
  r.method = method;
  r.url = url;
  r.headers = std::move(headers);
  r.body = std::move(body);
  r.timeout = 2s;
  auto response = io::http_request_blocking(std::move(r));
  REQUIRE(response.ok());
  return std::move(response).value();
}

std::unique_ptr<MetadataEmulator> start(EmulatorScenario s = {}) {
  auto e = MetadataEmulator::start(std::move(s));
  REQUIRE(e.ok());
  return std::move(e).value();
}

}  // namespace

TEST_CASE("emulator: AWS IMDSv2 token rules", "[integration]") {
  auto emu = start();
  const std::string spot = emu->base_url() + kAwsSpotPath;
  CHECK(fetch("GET", spot).status == 401);
  CHECK(fetch("PUT", emu->base_url() + "/latest/api/token").status == 400);
  auto token = fetch("PUT", emu->base_url() + "/latest/api/token",
                     {{"X-aws-ec2-metadata-token-ttl-seconds", "60"}});
  REQUIRE(token.status == 200);
  CHECK(token.headers.get("X-aws-ec2-metadata-token-ttl-seconds") == "60");
  CHECK(fetch("GET", spot, {{"X-aws-ec2-metadata-token", token.body}}).status == 404);
  CHECK(fetch("GET", spot, {{"X-aws-ec2-metadata-token", "forged"}}).status == 401);
  auto scheduled =
      fetch("GET", emu->base_url() + kAwsScheduledPath, {{"X-aws-ec2-metadata-token", token.body}});
  CHECK(scheduled.body == "[]");
}

// The value of a string member in the emulator's compact JSON ("Key":"value").
std::string json_field(const std::string& body, const std::string& key) {
  const std::string open = "\"" + key + "\":\"";
  const size_t at = body.find(open);
  if (at == std::string::npos) return "";
  const size_t from = at + open.size();
  return body.substr(from, body.find('"', from) - from);
}

TEST_CASE("emulator: AWS instance-role credentials, token required, rotating", "[integration]") {
  EmulatorScenario s;
  s.aws_role.name = "sg-role";
  s.aws_role.access_key_id = "ASIAROLE";
  s.aws_role.secret_access_key = "role/secret";
  s.aws_role.token = "role-token";
  s.aws_role.expires_after_s = 3600;
  s.aws_role.rotate = true;
  auto emu = start(std::move(s));
  const std::string list = emu->base_url() + kAwsRolesPath;
  CHECK(fetch("GET", list).status == 401);
  CHECK(fetch("GET", list + "sg-role").status == 401);
  CHECK(fetch("GET", list, {{"X-aws-ec2-metadata-token", "forged"}}).status == 401);
  auto token = fetch("PUT", emu->base_url() + "/latest/api/token",
                     {{"X-aws-ec2-metadata-token-ttl-seconds", "60"}});
  REQUIRE(token.status == 200);
  const io::HttpHeaders auth{{"X-aws-ec2-metadata-token", token.body}};
  auto role = fetch("GET", list, auth);
  CHECK(role.status == 200);
  CHECK(role.body == "sg-role");
  CHECK(fetch("GET", list.substr(0, list.size() - 1), auth).body == "sg-role");  // no '/'
  CHECK(fetch("GET", list + "other-role", auth).status == 404);

  const WallTime asked = std::chrono::system_clock::now();
  auto first = fetch("GET", list + "sg-role", auth);
  REQUIRE(first.status == 200);
  CHECK(json_field(first.body, "Code") == "Success");
  CHECK(json_field(first.body, "Type") == "AWS-HMAC");
  CHECK(json_field(first.body, "AccessKeyId") == "ASIAROLE1");
  CHECK(json_field(first.body, "SecretAccessKey") == "role/secret1");
  CHECK(json_field(first.body, "Token") == "role-token1");
  auto expiration = parse_rfc3339(json_field(first.body, "Expiration"));
  REQUIRE(expiration.ok());
  CHECK(*expiration - asked > 3600s - 3s);
  CHECK(*expiration - asked < 3600s + 2s);
  REQUIRE(parse_rfc3339(json_field(first.body, "LastUpdated")).ok());
  auto second = fetch("GET", list + "sg-role", auth);
  CHECK(json_field(second.body, "AccessKeyId") == "ASIAROLE2");
  CHECK(json_field(second.body, "SecretAccessKey") == "role/secret2");
  CHECK(emu->count("GET", std::string(kAwsRolesPath) + "sg-role") == 3);  // a 401, two fetches
}

TEST_CASE("emulator: AWS instance role absent by default, fixed keys, an error Code",
          "[integration]") {
  const std::string kind = GENERATE(as<std::string>{}, "none", "fixed", "error");
  EmulatorScenario s;
  if (kind != "none") s.aws_role.name = "r";
  if (kind == "error") s.aws_role.code = "AssumeRoleUnauthorizedAccess";
  auto emu = start(std::move(s));
  auto token = fetch("PUT", emu->base_url() + "/latest/api/token",
                     {{"X-aws-ec2-metadata-token-ttl-seconds", "60"}});
  const io::HttpHeaders auth{{"X-aws-ec2-metadata-token", token.body}};
  const std::string list = emu->base_url() + kAwsRolesPath;
  auto doc = fetch("GET", list + "r", auth);
  if (kind == "none") {
    CHECK(fetch("GET", list, auth).status == 404);
    CHECK(doc.status == 404);
  } else if (kind == "fixed") {
    CHECK(json_field(doc.body, "AccessKeyId") == AwsInstanceRole{}.access_key_id);
    CHECK(json_field(fetch("GET", list + "r", auth).body, "AccessKeyId") ==
          AwsInstanceRole{}.access_key_id);  // no rotation: the same keys again
  } else {
    CHECK(doc.status == 200);
    CHECK(json_field(doc.body, "Code") == "AssumeRoleUnauthorizedAccess");
    CHECK_THAT(doc.body, !Catch::Contains("AccessKeyId"));
  }
}

TEST_CASE("emulator: AWS GET without a token when IMDSv2 is optional still serves the role",
          "[integration]") {
  EmulatorScenario s;
  s.imdsv2_required = false;
  s.aws_role.name = "r";
  auto emu = start(std::move(s));
  CHECK(fetch("GET", emu->base_url() + kAwsRolesPath).body == "r");
}

TEST_CASE("emulator: GCP header, ETag and a stale last_etag", "[integration]") {
  auto emu = start();
  const std::string url = emu->base_url() + kGcpPreemptedPath;
  CHECK(fetch("GET", url).status == 403);
  auto first = fetch("GET", url, {{"Metadata-Flavor", "Google"}});
  CHECK(first.body == "FALSE");
  CHECK(first.headers.get("Metadata-Flavor") == "Google");
  REQUIRE(first.headers.get("ETag"));
  // A last_etag that is not the current one answers at once.
  const auto t0 = std::chrono::steady_clock::now();
  auto stale = fetch("GET", url + "?wait_for_change=true&last_etag=old&timeout_sec=5",
                     {{"Metadata-Flavor", "Google"}});
  CHECK(stale.body == "FALSE");
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
}

TEST_CASE("emulator: Azure header rule, document, ack turns the event Started", "[integration]") {
  EmulatorScenario s;
  s.azure_events = {{0, -1,
                     R"({"EventId": "e1", "EventType": "Freeze", "Resources": ["sg-test-vm"],
                         "EventStatus": "Scheduled", "NotBefore": "${rfc1123:+900}"})"}};
  auto emu = start(std::move(s));
  const std::string url = emu->base_url() + "/metadata/scheduledevents?api-version=2020-07-01";
  CHECK(fetch("GET", url).status == 400);
  auto doc = fetch("GET", url, {{"Metadata", "true"}});
  REQUIRE(doc.status == 200);
  CHECK_THAT(doc.body, Catch::Contains(R"("EventStatus":"Scheduled")"));
  CHECK_THAT(doc.body, Catch::Contains(" GMT\""));
  CHECK(fetch("POST", url, {{"Metadata", "true"}}, "nonsense").status == 400);
  CHECK(fetch("POST", url, {{"Metadata", "true"}}, R"({"StartRequests":[{"EventId":"e1"}]})")
            .status == 200);
  doc = fetch("GET", url, {{"Metadata", "true"}});
  CHECK_THAT(doc.body, Catch::Contains(R"("EventStatus":"Started")"));
  CHECK_THAT(doc.body, Catch::Contains(R"("NotBefore":"")"));
}

TEST_CASE("emulator: faults apply to the first N matching requests", "[integration]") {
  EmulatorScenario s;
  s.faults.push_back({"", "/computeMetadata/", 0, -1, 2, 503, "busy", 0, false, false});
  auto emu = start(std::move(s));
  const std::string url = emu->base_url() + kGcpPreemptedPath;
  CHECK(fetch("GET", url, {{"Metadata-Flavor", "Google"}}).status == 503);
  CHECK(fetch("GET", url, {{"Metadata-Flavor", "Google"}}).status == 503);
  CHECK(fetch("GET", url, {{"Metadata-Flavor", "Google"}}).status == 200);
  CHECK(emu->count("GET", kGcpPreemptedPath) == 3);
}

TEST_CASE("emulator: scenario files", "[integration]") {
  auto s = parse_emulator_scenario(R"({
    "clouds": ["aws"], "aws_token_lifetime_ms": 500,
    "timelines": {"/latest/meta-data/spot/instance-action":
                    [{"at_ms": 100, "status": 200, "json": {"action": "stop", "time": "x"}}]},
    "azure_events": [{"at_ms": 0, "event": {"EventId": "e"}}],
    "faults": [{"path": "/latest", "status": 503, "count": 3}]})");
  REQUIRE(s.ok());
  CHECK(s->aws);
  CHECK_FALSE(s->gcp);
  CHECK(s->aws_token_lifetime_ms == 500);
  CHECK(s->timelines[kAwsSpotPath].at(0).body == R"({"action":"stop","time":"x"})");
  CHECK(s->faults.at(0).count == 3);
  CHECK_FALSE(parse_emulator_scenario(R"({"faults": [{"status": "x"}]})").ok());
  auto role = parse_emulator_scenario(R"({"aws_role": {"name": "r", "access_key_id": "ASIA",
    "secret_access_key": "s", "token": "t", "expires_after_s": 900, "rotate": true,
    "code": "Success"}})");
  REQUIRE(role.ok());
  CHECK(role->aws_role.name == "r");
  CHECK(role->aws_role.access_key_id == "ASIA");
  CHECK(role->aws_role.secret_access_key == "s");
  CHECK(role->aws_role.token == "t");
  CHECK(role->aws_role.expires_after_s == 900);
  CHECK(role->aws_role.rotate);
  CHECK(parse_emulator_scenario("{}")->aws_role.name.empty());
  auto bad_role = parse_emulator_scenario(R"({"aws_role": {"rotate": "yes"}})");
  REQUIRE_FALSE(bad_role.ok());
  CHECK(bad_role.error().message() == "scenario aws_role.rotate: not a boolean");
  CHECK_FALSE(parse_emulator_scenario(R"({"aws_role": "r"})").ok());
  CHECK_FALSE(parse_emulator_scenario(R"({"clouds": ["ibm"]})").ok());
  CHECK_FALSE(parse_emulator_scenario("[").ok());
}

TEST_CASE("emulator: the standalone program serves a scenario and records requests",
          "[integration]") {
  TempDir dir;
  spit(dir / "scenario.json",
       R"({"clouds": ["gcp"], "timelines": {"/computeMetadata/v1/instance/preempted":
           [{"at_ms": 0, "body": "TRUE"}]}})");
  const std::string cmd = std::string(SG_METADATA_EMULATOR_BIN) + " --port 0 --scenario " +
                          (dir / "scenario.json") + " --record " + (dir / "requests.jsonl");
  int out[2];
  REQUIRE(::pipe(out) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  FILE* child_out = ::fdopen(out[0], "r");
  char line[256] = "";
  REQUIRE(std::fgets(line, sizeof line, child_out) != nullptr);
  std::string url = line;
  REQUIRE(url.rfind("listening on ", 0) == 0);
  url = url.substr(13, url.find('\n') - 13);
  auto answer = fetch("GET", url + kGcpPreemptedPath, {{"Metadata-Flavor", "Google"}});
  CHECK(answer.body == "TRUE");
  CHECK(fetch("PUT", url + "/latest/api/token", {{"X-aws-ec2-metadata-token-ttl-seconds", "60"}})
            .status == 404);  // aws is off in this scenario
  ::kill(pid, SIGTERM);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  std::fclose(child_out);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  const std::string record = slurp(dir / "requests.jsonl");
  CHECK_THAT(record, Catch::Contains(R"("target":"/computeMetadata/v1/instance/preempted")"));
  CHECK_THAT(record, Catch::Contains(R"("Metadata-Flavor":"Google")"));
}

TEST_CASE("emulator: the standalone program's --help, and --aws-role", "[integration]") {
  const std::string bin = SG_METADATA_EMULATOR_BIN;
  for (const char* flag : {"--help", "-h", "--port 0 --help"}) {
    FILE* out = ::popen((bin + " " + flag + " 2>/dev/null").c_str(), "r");
    REQUIRE(out != nullptr);
    std::string text;
    char buf[256];
    while (std::fgets(buf, sizeof buf, out) != nullptr) text += buf;
    const int status = ::pclose(out);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK_THAT(text, Catch::StartsWith("usage: sg_metadata_emulator"));
    CHECK_THAT(text, Catch::Contains("--aws-role NAME"));
  }
  FILE* bad = ::popen((bin + " --bogus 2>&1").c_str(), "r");
  REQUIRE(bad != nullptr);
  char line[256] = "";
  REQUIRE(std::fgets(line, sizeof line, bad) != nullptr);
  CHECK_THAT(std::string(line), Catch::Contains("unknown argument --bogus"));
  while (std::fgets(line, sizeof line, bad) != nullptr) {
  }
  const int status = ::pclose(bad);
  CHECK(WEXITSTATUS(status) == 2);

  int out[2];
  REQUIRE(::pipe(out) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::execl(bin.c_str(), bin.c_str(), "--aws-role", "demo-role", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  FILE* child_out = ::fdopen(out[0], "r");
  REQUIRE(std::fgets(line, sizeof line, child_out) != nullptr);
  std::string url = line;
  REQUIRE(url.rfind("listening on ", 0) == 0);
  url = url.substr(13, url.find('\n') - 13);
  auto token =
      fetch("PUT", url + "/latest/api/token", {{"X-aws-ec2-metadata-token-ttl-seconds", "60"}});
  const io::HttpHeaders auth{{"X-aws-ec2-metadata-token", token.body}};
  CHECK(fetch("GET", url + kAwsRolesPath, auth).body == "demo-role");
  CHECK(json_field(fetch("GET", url + kAwsRolesPath + "demo-role", auth).body, "Code") ==
        "Success");
  ::kill(pid, SIGTERM);
  int child_status = 0;
  REQUIRE(::waitpid(pid, &child_status, 0) == pid);
  std::fclose(child_out);
  CHECK(WEXITSTATUS(child_status) == 0);
}

TEST_CASE("cloud detect live: each cloud alone, and nothing listening", "[integration]") {
  const std::string cloud = GENERATE(as<std::string>{}, "aws", "gcp", "azure", "none");
  EmulatorScenario s;
  s.aws = cloud == "aws";
  s.gcp = cloud == "gcp";
  s.azure = cloud == "azure";
  auto emu = start(std::move(s));
  agent::CloudDetectOptions options;
  options.aws_base_url = options.gcp_base_url = options.azure_base_url = emu->base_url();
  io::EventLoop loop;
  io::BeastHttpClient http(loop);
  std::optional<agent::CloudDetection> result;
  agent::detect_clouds(http, options, [&](agent::CloudDetection d) { result = std::move(d); });
  REQUIRE(loop.run_until([&] { return result.has_value(); }, 2s));
  CHECK(result->aws == (cloud == "aws"));
  CHECK(result->gcp == (cloud == "gcp"));
  CHECK(result->azure == (cloud == "azure"));
  if (cloud == "azure") CHECK(result->azure_vm_name == "sg-test-vm");
}

TEST_CASE("cloud detect live: a closed port and a silent one are quick no's", "[integration]") {
  agent::CloudDetectOptions options;
  std::string closed;
  {
    auto emu = start();
    closed = emu->base_url();
  }  // stopped: the port refuses connections now
  EmulatorScenario silent;
  silent.faults.push_back({"", "/", 0, -1, -1, 0, "", 0, true, false});
  auto hanging = start(std::move(silent));
  options.aws_base_url = closed;
  options.gcp_base_url = hanging->base_url();
  options.azure_base_url = hanging->base_url();
  io::EventLoop loop;
  io::BeastHttpClient http(loop);
  std::optional<agent::CloudDetection> result;
  const auto t0 = std::chrono::steady_clock::now();
  agent::detect_clouds(http, options, [&](agent::CloudDetection d) { result = std::move(d); });
  REQUIRE(loop.run_until([&] { return result.has_value(); }, 2s));
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  CHECK_FALSE(result->any());
  CHECK(result->notes.size() == 3);
}
