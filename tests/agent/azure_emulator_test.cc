// AzureSource against the metadata emulator: events for this VM, the ack POST, flaky answers.
#include <catch2/catch.hpp>

#include "core/time_formats.h"
#include "tests/agent/live_fixture.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::agent;
using namespace shardguard::testing;

namespace {

std::string preempt_event(const std::string& id, const std::string& vm) {
  return R"({"EventId": ")" + id + R"(", "EventType": "Preempt", "ResourceType": "VirtualMachine",
             "Resources": [")" +
         vm + R"("], "EventStatus": "Scheduled",
             "NotBefore": "Tue, 01 Jan 2030 00:00:30 GMT", "Description": "Spot eviction",
             "EventSource": "Platform", "DurationInSeconds": -1})";
}

}  // namespace

TEST_CASE("azure live: a Preempt for this VM within one poll interval; ack seen by Azure",
          "[integration]") {
  EmulatorScenario s;
  s.azure_vm_name = "vm-a";
  s.azure_events = {{400, -1, preempt_event("B3F1A4E2-0000-4000-8000-000000000001", "vm-a")}};
  LiveFixture f(std::move(s));
  AzureSource source(f.azure_config(), f.http, RealClock::instance(), f.timers, make_random(1));
  source.start(f.sink());
  REQUIRE(f.wait_notices(1, 3000ms));
  const Notice& n = f.seen.notices[0];
  CHECK(n.kind == "preempted");
  CHECK(n.event_id == "B3F1A4E2-0000-4000-8000-000000000001");
  CHECK(n.deadline == *parse_rfc3339("2030-01-01T00:00:30Z"));
  CHECK(f.seen_at_ms[0] <= 400 + 100 + 250);  // one poll interval + slack
  CHECK(source.vm_name() == "vm-a");  // learned from IMDS compute/name

  source.acknowledge(n);
  REQUIRE(
      f.loop.run_until([&] { return f.emulator->count("POST", kAzureEventsPath) == 1; }, 2000ms));
  REQUIRE(f.emulator->wait_for(
      [](const std::vector<RecordedRequest>& rs) {
        for (const auto& r : rs) {
          if (r.method == "POST" && r.status == 200) return true;
        }
        return false;
      },
      2000ms));
  for (const auto& r : f.emulator->requests()) {
    CHECK(r.header("Metadata") == "true");
    if (r.method != "POST") continue;
    CHECK(r.body == R"({"StartRequests":[{"EventId":"B3F1A4E2-0000-4000-8000-000000000001"}]})");
    CHECK(r.target == "/metadata/scheduledevents?api-version=2020-07-01");
  }
  f.run_for(300ms);  // the event now shows as Started: still the same notice, not a new one
  CHECK(f.seen.notices.size() == 1);
}

TEST_CASE("azure live: an event for another VM is not a notice", "[integration]") {
  EmulatorScenario s;
  s.azure_vm_name = "vm-a";
  s.azure_events = {{0, -1, preempt_event("e-other", "vm-b")}};
  LiveFixture f(std::move(s));
  AzureSource source(f.azure_config(), f.http, RealClock::instance(), f.timers, make_random(1));
  source.start(f.sink());
  f.run_for(800ms);
  CHECK(f.seen.notices.empty());
  CHECK(source.counters().errors == 0);
  CHECK(source.counters().polls >= 4);
}

TEST_CASE("azure live: flaky answers give no false notice, then the real one", "[integration]") {
  const std::string kind =
      GENERATE(as<std::string>{}, "410", "429", "500", "503", "slow", "hang", "close", "malformed");
  EmulatorScenario s;
  s.azure_vm_name = "vm-a";
  s.azure_events = {{700, -1, preempt_event("e-1", "vm-a")}};
  EmulatorFault fault;
  fault.path_prefix = kAzureEventsPath;
  fault.method = "GET";
  fault.until_ms = 600;
  if (kind == "slow") {
    fault.delay_ms = 400;
  } else if (kind == "hang") {
    fault.hang = true;
  } else if (kind == "close") {
    fault.close = true;
  } else if (kind == "malformed") {
    fault.status = 200;
    fault.body = R"({"DocumentIncarnation": 3, "Events": [{"EventId": "e-1", "EventType": "Pre)";
  } else {
    fault.status = std::stoi(kind);
  }
  s.faults.push_back(fault);
  LiveFixture f(std::move(s));
  auto config = f.azure_config();
  config.vm_name = "vm-a";
  AzureSource source(config, f.http, RealClock::instance(), f.timers, make_random(1));
  source.start(f.sink());
  f.run_for(600ms);
  CHECK(f.seen.notices.empty());
  CHECK(source.counters().errors > 0);
  REQUIRE(f.wait_notices(1, 3000ms));
  CHECK(f.seen.notices[0].event_id == "e-1");
}
