// AzureSource against FakeHttpClient + FakeClock: events for this VM only, NotBefore as the
// deadline, the VM name from IMDS, the StartRequests acknowledgement, flaky answers.
#include "agent/azure_source.h"

#include <catch2/catch.hpp>

#include "core/time_formats.h"
#include "tests/agent/notice_collector.h"
#include "tests/support/fake_http.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::agent;
using shardguard::testing::FakeHttpClient;

namespace {

constexpr char kEvents[] = "/metadata/scheduledevents";
constexpr char kName[] = "/metadata/instance/compute/name";

std::string document(const std::string& events, int incarnation = 2) {
  return R"({"DocumentIncarnation": )" + std::to_string(incarnation) + R"(, "Events": [)" + events +
         "]}";
}

std::string event(const std::string& id, const std::string& type, const std::string& vm,
                  const std::string& not_before, const std::string& status = "Scheduled") {
  return R"({"EventId": ")" + id + R"(", "EventType": ")" + type +
         R"(", "ResourceType": "VirtualMachine", "Resources": [")" + vm +
         R"("], "EventStatus": ")" + status + R"(", "NotBefore": ")" + not_before +
         R"(", "Description": "", "EventSource": "Platform", "DurationInSeconds": -1})";
}

struct AzureFixture {
  FakeClock clock;
  FakeHttpClient http{clock};
  AzureSourceConfig config;
  testing::NoticeCollector seen;
  std::unique_ptr<AzureSource> source;

  AzureFixture() {
    config.vm_name = "vm-a";
    http.respond("GET", kEvents, 200, document(""));
  }
  void start() {
    source = std::make_unique<AzureSource>(config, http, clock, clock, make_random(5));
    source->start(seen.sink());
    clock.advance(0s);
  }
};

}  // namespace

TEST_CASE("azure: a Preempt for this VM is a notice with NotBefore as the deadline") {
  AzureFixture f;
  const WallTime not_before = f.clock.wall_now() + 30s;
  f.start();
  f.clock.advance(3s);
  CHECK(f.seen.notices.empty());
  f.http.respond("GET", kEvents, 200,
                 document(event("602d9444-d2cd-49c7-8624-8643e7171297", "Preempt", "VM-A",
                                format_rfc1123(not_before))));
  f.clock.advance(f.config.poll_interval);
  REQUIRE(f.seen.notices.size() == 1);
  const Notice& n = f.seen.notices[0];
  CHECK(n.source == "azure");
  CHECK(n.kind == "preempted");
  CHECK(n.is_preemption);
  CHECK(n.deadline == not_before);
  CHECK(n.event_id == "602d9444-d2cd-49c7-8624-8643e7171297");
  const io::HttpRequest& r = f.http.requests().back();
  CHECK(r.headers.get("Metadata") == "true");
  CHECK_THAT(r.url, Catch::EndsWith("/metadata/scheduledevents?api-version=2020-07-01"));
  f.clock.advance(10s);
  CHECK(f.seen.notices.size() == 1);
}

TEST_CASE("azure: events for another VM are ignored") {
  AzureFixture f;
  f.http.respond("GET", kEvents, 200,
                 document(event("e1", "Preempt", "vm-b", "Mon, 19 Sep 2016 18:29:47 GMT")));
  f.start();
  f.clock.advance(10s);
  CHECK(f.seen.notices.empty());
  CHECK(f.source->counters().errors == 0);
}

TEST_CASE("azure: event types map to kinds; Started with no NotBefore means now") {
  AzureFixture f;
  f.http.respond("GET", kEvents, 200,
                 document(event("t", "Terminate", "vm-a", "") + "," +
                          event("f", "Freeze", "vm-a", "Mon, 19 Sep 2050 18:29:47 GMT") + "," +
                          event("r", "Reboot", "vm-a", "", "Started") + "," +
                          event("x", "Unheard", "vm-a", "")));
  f.start();
  REQUIRE(f.seen.notices.size() == 3);
  CHECK(f.seen.notices[0].kind == "terminate");
  CHECK(f.seen.notices[0].deadline == f.clock.wall_now());
  CHECK(f.seen.notices[1].kind == "freeze");
  CHECK_FALSE(f.seen.notices[1].is_preemption);
  CHECK(f.seen.notices[2].kind == "reboot");
  CHECK(f.seen.notices[2].is_preemption);
}

TEST_CASE("azure: the VM name comes from IMDS when not configured") {
  AzureFixture f;
  f.config.vm_name.clear();
  f.http.respond("GET", kName, 200, "vm-a\n");
  f.http.respond("GET", kEvents, 200, document(event("e1", "Preempt", "vm-a", "")));
  f.start();
  REQUIRE(f.seen.notices.size() == 1);
  CHECK(f.source->vm_name() == "vm-a");
  CHECK(f.http.requests().front().headers.get("Metadata") == "true");
}

TEST_CASE("azure: acknowledge POSTs StartRequests, retrying a failed POST") {
  AzureFixture f;
  f.http.respond("GET", kEvents, 200, document(event("e-42", "Preempt", "vm-a", "")));
  int posts = 0;
  f.http.route("POST", kEvents, [&](const io::HttpRequest&) {
    return std::optional(FakeHttpClient::answer(++posts == 1 ? 500 : 200));
  });
  f.start();
  REQUIRE(f.seen.notices.size() == 1);
  f.source->acknowledge(f.seen.notices[0]);
  f.clock.advance(0s);
  CHECK(posts == 1);
  f.clock.advance(2s);
  CHECK(posts == 2);
  f.clock.advance(1min);
  CHECK(posts == 2);
  for (const auto& r : f.http.requests()) {
    if (r.method != "POST") continue;
    CHECK(r.body == R"({"StartRequests":[{"EventId":"e-42"}]})");
    CHECK(r.headers.get("Metadata") == "true");
  }
}

TEST_CASE("azure: acknowledge ignores notices from other sources") {
  AzureFixture f;
  f.start();
  Notice n;
  n.source = "aws";
  n.event_id = "x";
  f.source->acknowledge(n);
  f.clock.advance(1s);
  CHECK(f.http.count("POST", kEvents) == 0);
}

TEST_CASE("azure: no-information answers never make a notice") {
  AzureFixture f;
  const std::string label = GENERATE(as<std::string>{}, "410", "429", "500", "503", "400",
                                     "bad-json", "no-events", "bad-time", "timeout");
  if (label == "bad-json") {
    f.http.respond("GET", kEvents, 200, R"({"DocumentIncarnation": 1, "Events": [{"Ev)");
  } else if (label == "no-events") {
    f.http.respond("GET", kEvents, 200, R"({"DocumentIncarnation": 1})");
  } else if (label == "bad-time") {
    f.http.respond("GET", kEvents, 200, document(event("e1", "Preempt", "vm-a", "tomorrow")));
  } else if (label == "timeout") {
    f.http.hang("GET", kEvents);
  } else {
    f.http.respond("GET", kEvents, std::stoi(label), document(event("e1", "Preempt", "vm-a", "")));
  }
  f.start();
  f.clock.advance(5min);
  CHECK(f.seen.notices.empty());
  CHECK(f.source->counters().errors > 0);
}
