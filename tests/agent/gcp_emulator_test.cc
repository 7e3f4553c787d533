// GcpSource against the metadata emulator: start-up read, hanging GETs, flaky answers.
#include <catch2/catch.hpp>

#include "tests/agent/live_fixture.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::agent;
using namespace shardguard::testing;

namespace {

bool is_wait(const RecordedRequest& r) {
  return r.target.find("wait_for_change=true") != std::string::npos;
}

}  // namespace

TEST_CASE("gcp live: the first read at start-up catches an already preempted VM", "[integration]") {
  EmulatorScenario s;
  s.timelines[kGcpPreemptedPath] = {{0, 200, "TRUE"}};
  LiveFixture f(std::move(s));
  GcpSource source(f.gcp_config(), f.http, RealClock::instance(), f.timers, make_random(1));
  const WallTime before = std::chrono::system_clock::now();
  source.start(f.sink());
  REQUIRE(f.wait_notices(1, 2000ms));
  CHECK(f.seen.notices[0].kind == "preempted");
  CHECK(f.seen.notices[0].deadline >= before + 30s);
  CHECK(f.seen.notices[0].deadline <= std::chrono::system_clock::now() + 30s);
  const auto requests = f.emulator->requests();
  REQUIRE_FALSE(requests.empty());
  CHECK_FALSE(is_wait(requests.front()));
  CHECK(requests.front().header("Metadata-Flavor") == "Google");
}

TEST_CASE("gcp live: the hanging GET returns on change with a new ETag", "[integration]") {
  EmulatorScenario s;
  s.timelines[kGcpPreemptedPath] = {{0, 200, "FALSE"}, {600, 200, "TRUE"}};
  LiveFixture f(std::move(s));
  GcpSource source(f.gcp_config(), f.http, RealClock::instance(), f.timers, make_random(1));
  source.start(f.sink());
  REQUIRE(f.wait_notices(1, 3000ms));
  CHECK(f.seen_at_ms[0] >= 600);
  CHECK(f.seen_at_ms[0] <= 600 + 250);  // the watch answers on change, no poll interval
  bool waited_with_etag = false;
  for (const auto& r : f.emulator->requests()) {
    if (is_wait(r) && r.target.find("last_etag=") != std::string::npos &&
        r.target.find("timeout_sec=2") != std::string::npos) {
      waited_with_etag = true;
    }
  }
  CHECK(waited_with_etag);
  CHECK(source.counters().errors == 0);
}

TEST_CASE("gcp live: a hanging GET that reaches timeout_sec is renewed, no notice",
          "[integration]") {
  LiveFixture f(EmulatorScenario{});
  auto config = f.gcp_config();
  config.wait_timeout = 1s;
  GcpSource source(config, f.http, RealClock::instance(), f.timers, make_random(1));
  source.start(f.sink());
  f.run_for(2300ms);
  CHECK(f.seen.notices.empty());
  CHECK(source.counters().errors == 0);
  size_t waits = 0;
  for (const auto& r : f.emulator->requests()) waits += is_wait(r) && r.path == kGcpPreemptedPath;
  CHECK(waits >= 2);
  CHECK(waits <= 4);
}

TEST_CASE("gcp live: flaky answers give no false notice, then the real one", "[integration]") {
  const std::string kind =
      GENERATE(as<std::string>{}, "503", "500", "403", "hang", "close", "garbage");
  EmulatorScenario s;
  s.timelines[kGcpMaintenancePath] = {{0, 200, "NONE"},
                                      {700, 200, "TERMINATE_ON_HOST_MAINTENANCE"}};
  EmulatorFault fault;
  fault.path_prefix = "/computeMetadata/";
  fault.until_ms = 600;
  if (kind == "hang") {
    fault.hang = true;
  } else if (kind == "close") {
    fault.close = true;
  } else if (kind == "garbage") {
    fault.status = 200;
    fault.body = "<html>TERMINATE_ON_HOST_MAINTENANCE</html>";
  } else {
    fault.status = std::stoi(kind);
  }
  s.faults.push_back(fault);
  LiveFixture f(std::move(s));
  auto config = f.gcp_config();
  config.wait_margin = 200ms;  // a hung plain GET times out at 300 ms, a hung watch at 2.2 s
  config.wait_timeout = 1s;
  GcpSource source(config, f.http, RealClock::instance(), f.timers, make_random(1));
  source.start(f.sink());
  f.run_for(600ms);
  CHECK(f.seen.notices.empty());
  REQUIRE(f.wait_notices(1, 4000ms));
  CHECK(f.seen.notices[0].kind == "maintenance");
  CHECK(f.seen.notices.size() == 1);
}
