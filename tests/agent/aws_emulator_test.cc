// AwsSource against the metadata emulator over real loopback HTTP.
#include <catch2/catch.hpp>

#include "core/time_formats.h"
#include "tests/agent/live_fixture.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::agent;
using namespace shardguard::testing;

namespace {

constexpr char kSpotBody[] = R"({"action": "terminate", "time": "2030-01-01T00:02:00Z"})";

EmulatorScenario spot_at(int64_t at_ms) {
  EmulatorScenario s;
  s.timelines[kAwsSpotPath] = {{at_ms, 200, kSpotBody}};
  return s;
}

}  // namespace

TEST_CASE("aws live: a spot notice is seen within one poll interval, with its deadline",
          "[integration]") {
  LiveFixture f(spot_at(400));
  AwsSource source(f.aws_config(), f.http, RealClock::instance(), f.timers, make_random(1));
  source.start(f.sink());
  REQUIRE(f.wait_notices(1, 3000ms));
  CHECK(f.seen.notices[0].kind == "spot-interruption");
  CHECK(f.seen.notices[0].deadline == *parse_rfc3339("2030-01-01T00:02:00Z"));
  CHECK(f.seen_at_ms[0] >= 400);
  CHECK(f.seen_at_ms[0] <= 400 + 100 + 250);  // one poll interval, plus scheduling slack
  f.run_for(300ms);
  CHECK(f.seen.notices.size() == 1);
  for (const auto& r : f.emulator->requests()) {
    if (r.method == "GET") CHECK(r.header("X-aws-ec2-metadata-token").has_value());
    if (r.method == "PUT") CHECK(r.header("X-aws-ec2-metadata-token-ttl-seconds") == "21600");
  }
  CHECK(source.counters().errors == 0);
}

TEST_CASE("aws live: placeholders give a deadline two minutes after the event appeared",
          "[integration]") {
  EmulatorScenario s;
  s.timelines[kAwsSpotPath] = {{200, 200, R"({"action": "stop", "time": "${rfc3339:+120}"})"}};
  LiveFixture f(std::move(s));
  const WallTime started = std::chrono::system_clock::now();
  AwsSource source(f.aws_config(), f.http, RealClock::instance(), f.timers, make_random(1));
  source.start(f.sink());
  REQUIRE(f.wait_notices(1, 3000ms));
  const auto lead = f.seen.notices[0].deadline - started;
  CHECK(lead > 118s);
  CHECK(lead < 122s);
}

TEST_CASE("aws live: tokens that expire early (401) are renewed; the notice still comes",
          "[integration]") {
  EmulatorScenario s = spot_at(700);
  s.aws_token_lifetime_ms = 250;
  LiveFixture f(std::move(s));
  AwsSource source(f.aws_config(), f.http, RealClock::instance(), f.timers, make_random(1));
  source.start(f.sink());
  REQUIRE(f.wait_notices(1, 3000ms));
  CHECK(f.seen.notices.size() == 1);
  CHECK(f.emulator->count("PUT", "/latest/api/token") >= 2);
  bool saw_401 = false;
  for (const auto& r : f.emulator->requests()) saw_401 = saw_401 || r.status == 401;
  CHECK(saw_401);
}

TEST_CASE("aws live: flaky endpoints give no false notice, then the real one", "[integration]") {
  const std::string kind = GENERATE(as<std::string>{}, "503", "429", "500", "slow", "hang", "close",
                                    "malformed", "token-503");
  EmulatorScenario s = spot_at(700);
  EmulatorFault fault;
  fault.path_prefix = kind == "token-503" ? "/latest/api/token" : "/latest/meta-data";
  fault.until_ms = 600;
  if (kind == "slow") {
    fault.delay_ms = 400;  // beyond the 300 ms request timeout
  } else if (kind == "hang") {
    fault.hang = true;
  } else if (kind == "close") {
    fault.close = true;
  } else if (kind == "malformed") {
    fault.status = 200;
    fault.body = R"({"action": "terminate", "time": )";
  } else {
    fault.status = kind == "token-503" ? 503 : std::stoi(kind);
  }
  s.faults.push_back(fault);
  LiveFixture f(std::move(s));
  AwsSource source(f.aws_config(), f.http, RealClock::instance(), f.timers, make_random(1));
  source.start(f.sink());
  f.run_for(600ms);
  CHECK(f.seen.notices.empty());
  CHECK(source.counters().errors > 0);
  REQUIRE(f.wait_notices(1, 3000ms));
  CHECK(f.seen.notices[0].deadline == *parse_rfc3339("2030-01-01T00:02:00Z"));
}

TEST_CASE("aws live: scheduled maintenance with AWS's own time format", "[integration]") {
  EmulatorScenario s;
  s.timelines[kAwsScheduledPath] = {
      {0, 200,
       R"([{"NotBefore": "21 Jan 2030 09:00:43 GMT", "Code": "instance-retirement",
            "EventId": "instance-event-1", "State": "active"}])"}};
  LiveFixture f(std::move(s));
  AwsSource source(f.aws_config(), f.http, RealClock::instance(), f.timers, make_random(1));
  source.start(f.sink());
  REQUIRE(f.wait_notices(1, 3000ms));
  CHECK(f.seen.notices[0].kind == "maintenance");
  CHECK(f.seen.notices[0].deadline == *parse_rfc3339("2030-01-21T09:00:43Z"));
}
