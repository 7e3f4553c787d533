// AwsSource against FakeHttpClient + FakeClock: notices, deadlines, IMDSv2 token handling,
// and "no information" answers that must never become notices.
#include "agent/aws_source.h"

#include <catch2/catch.hpp>

#include "core/time_formats.h"
#include "tests/agent/notice_collector.h"
#include "tests/support/fake_http.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::agent;
using shardguard::testing::FakeHttpClient;

namespace {

constexpr char kToken[] = "/latest/api/token";
constexpr char kSpot[] = "/latest/meta-data/spot/instance-action";
constexpr char kRebalance[] = "/latest/meta-data/events/recommendations/rebalance";
constexpr char kScheduled[] = "/latest/meta-data/events/maintenance/scheduled";

struct AwsFixture {
  FakeClock clock;
  FakeHttpClient http{clock};
  AwsSourceConfig config;
  testing::NoticeCollector seen;
  std::unique_ptr<AwsSource> source;

  AwsFixture() {
    http.respond("PUT", kToken, 200, "tok-1", {{"X-aws-ec2-metadata-token-ttl-seconds", "21600"}});
    http.respond("GET", kSpot, 404);
    http.respond("GET", kRebalance, 404);
    http.respond("GET", kScheduled, 200, "[]");
  }
  void start() {
    source = std::make_unique<AwsSource>(config, http, clock, clock, make_random(7));
    source->start(seen.sink());
    clock.advance(0s);
  }
  // Answers `path` with `body` once the clock reaches `at` (404 before).
  void appear_at(const std::string& path, Duration at, std::string body) {
    const SteadyTime when = clock.now() + at;
    http.route("GET", path, [this, when, body](const io::HttpRequest&) {
      return std::optional(clock.now() >= when ? FakeHttpClient::answer(200, body)
                                               : FakeHttpClient::answer(404));
    });
  }
};

}  // namespace

TEST_CASE("aws: no event means no notice, one token, token on every GET") {
  AwsFixture f;
  f.start();
  f.clock.advance(30s);
  CHECK(f.seen.notices.empty());
  CHECK(f.source->counters().errors == 0);
  CHECK(f.source->token_fetches() == 1);
  CHECK(f.http.count("GET", kSpot) >= 15);      // every 2 s
  CHECK(f.http.count("GET", kScheduled) == 1);  // every 60 s
  for (const auto& r : f.http.requests()) {
    if (r.method == "PUT") {
      CHECK(r.headers.get("X-aws-ec2-metadata-token-ttl-seconds") == "21600");
    } else {
      CHECK(r.headers.get("X-aws-ec2-metadata-token") == "tok-1");
    }
  }
}

TEST_CASE("aws: a spot interruption is seen within one poll interval, deadline = time") {
  AwsFixture f;
  const WallTime action_time = f.clock.wall_now() + 125s;
  f.appear_at(kSpot, 5s,
              R"({"action": "terminate", "time": ")" + format_rfc3339(action_time) + R"("})");
  f.start();
  f.clock.advance(5s);
  CHECK(f.seen.notices.empty());
  f.clock.advance(f.config.poll_interval);
  REQUIRE(f.seen.notices.size() == 1);
  const Notice& n = f.seen.notices[0];
  CHECK(n.source == "aws");
  CHECK(n.kind == "spot-interruption");
  CHECK(n.is_preemption);
  CHECK(n.deadline == action_time);
  CHECK(f.source->counters().notices == 1);
  f.clock.advance(60s);  // the notice stays up; it is reported once
  CHECK(f.seen.notices.size() == 1);
}

TEST_CASE("aws: a spot time already past is clamped to now") {
  AwsFixture f;
  f.http.respond(
      "GET", kSpot, 200,
      R"({"action":"hibernate","time":")" + format_rfc3339(f.clock.wall_now() - 10min) + R"("})");
  f.start();
  REQUIRE(f.seen.notices.size() == 1);
  CHECK(f.seen.notices[0].deadline == f.clock.wall_now());
  CHECK_THAT(f.seen.notices[0].detail, Catch::Contains("hibernate"));
}

TEST_CASE("aws: a rebalance recommendation is advisory") {
  AwsFixture f;
  f.http.respond("GET", kRebalance, 200, R"({"noticeTime": "2020-10-27T08:22:00Z"})");
  f.start();
  REQUIRE(f.seen.notices.size() == 1);
  CHECK(f.seen.notices[0].kind == "rebalance");
  CHECK_FALSE(f.seen.notices[0].is_preemption);
  CHECK(f.seen.notices[0].deadline == f.clock.wall_now() + f.config.rebalance_horizon);
}

TEST_CASE("aws: scheduled maintenance uses NotBefore; canceled events are skipped") {
  AwsFixture f;
  f.http.respond("GET", kScheduled, 200, R"([
    {"NotBefore": "21 Jan 2030 09:00:43 GMT", "Code": "system-reboot",
     "Description": "scheduled reboot", "EventId": "instance-event-0d59937288b749b32",
     "NotAfter": "21 Jan 2030 09:17:23 GMT", "State": "active"},
    {"NotBefore": "1 Feb 2030 09:00:00 GMT", "Code": "instance-stop",
     "EventId": "instance-event-gone", "State": "canceled"},
    {"NotBefore": "2 Feb 2030 10:00:00 GMT", "Code": "system-maintenance",
     "EventId": "instance-event-net", "State": "active"}])");
  f.start();
  REQUIRE(f.seen.notices.size() == 2);
  CHECK(f.seen.notices[0].kind == "maintenance");
  CHECK(f.seen.notices[0].event_id == "instance-event-0d59937288b749b32");
  CHECK(f.seen.notices[0].is_preemption);
  CHECK(f.seen.notices[0].deadline == *parse_rfc3339("2030-01-21T09:00:43Z"));
  CHECK(f.seen.notices[1].event_id == "instance-event-net");
  CHECK_FALSE(f.seen.notices[1].is_preemption);
}

TEST_CASE("aws: no-information answers never make a notice and back off") {
  AwsFixture f;
  const std::string label = GENERATE(as<std::string>{}, "503", "429", "410", "500", "bad-json",
                                     "wrong-shape", "bad-time", "timeout", "refused", "403");
  auto bad = [&](const std::string& path) {
    if (label == "bad-json") return f.http.respond("GET", path, 200, "{\"action\": \"termin");
    if (label == "wrong-shape") return f.http.respond("GET", path, 200, R"({"x": 1})");
    if (label == "bad-time") {
      return f.http.respond("GET", path, 200, R"({"action":"stop","time":"soon"})");
    }
    if (label == "timeout") return f.http.hang("GET", path);
    if (label == "refused") {
      return f.http.fail("GET", path, Error(ErrorCode::kIo, "GET x: Connection refused"));
    }
    f.http.respond("GET", path, std::stoi(label), "error page");
  };
  bad(kSpot);
  bad(kRebalance);
  f.start();
  f.clock.advance(60s);
  CHECK(f.seen.notices.empty());
  const auto c = f.source->counters();
  CHECK(c.errors > 0);
  // Backoff: fewer polls than one every 2 s, but never more than 4 s (2 x the interval)
  // between two: a 2-minute spot notice is never hidden by a long backoff.
  CHECK(f.http.count("GET", kSpot) < 30);
  CHECK(f.http.count("GET", kSpot) >= 10);  // a 30 s backoff made 4 or 5
}

TEST_CASE("aws: after errors, answers come back and the notice is still seen") {
  AwsFixture f;
  f.http.respond("GET", kSpot, 503);
  f.start();
  f.clock.advance(20s);
  CHECK(f.seen.notices.empty());
  f.http.respond("GET", kSpot, 200, R"({"action":"stop","time":"2030-01-01T00:00:00Z"})");
  f.clock.advance(31s);  // at most one max backoff
  REQUIRE(f.seen.notices.size() == 1);
  CHECK(f.seen.notices[0].deadline == *parse_rfc3339("2030-01-01T00:00:00Z"));
}

TEST_CASE("aws: a 401 drops the token, fetches a new one and retries at once") {
  AwsFixture f;
  int puts = 0;
  f.http.route("PUT", kToken, [&](const io::HttpRequest&) {
    return std::optional(FakeHttpClient::answer(200, "tok-" + std::to_string(++puts)));
  });
  f.http.route("GET", kSpot, [&](const io::HttpRequest& r) {
    if (r.headers.get("X-aws-ec2-metadata-token") == "tok-1") {
      return std::optional(FakeHttpClient::answer(401));
    }
    return std::optional(
        FakeHttpClient::answer(200, R"({"action":"terminate","time":"2030-01-01T00:00:00Z"})"));
  });
  f.config.watch_rebalance = f.config.watch_maintenance = false;
  f.start();
  REQUIRE(f.seen.notices.size() == 1);  // within the same instant: no backoff for a 401
  CHECK(puts == 2);
}

TEST_CASE("aws: the token is renewed before its TTL runs out") {
  AwsFixture f;
  int puts = 0;
  f.http.route("PUT", kToken, [&](const io::HttpRequest&) {
    ++puts;
    return std::optional(FakeHttpClient::answer(
        200, "tok", {{"X-aws-ec2-metadata-token-ttl-seconds", "120"}}));  // shorter than asked
  });
  f.start();
  f.clock.advance(61s);
  CHECK(puts == 1);
  f.clock.advance(30s);  // renewal at 120 s - 30 s margin
  CHECK(puts == 2);
  CHECK(f.source->counters().errors == 0);
}

TEST_CASE("aws: a failing token PUT is no information, retried with backoff") {
  AwsFixture f;
  f.http.respond("PUT", kToken, 503);
  f.http.respond("GET", kSpot, 200, R"({"action":"stop","time":"2030-01-01T00:00:00Z"})");
  f.start();
  f.clock.advance(20s);
  CHECK(f.seen.notices.empty());
  CHECK(f.http.count("GET", kSpot) == 0);
  CHECK(f.source->counters().errors > 0);
}

TEST_CASE("aws: stop() cancels timers and drops answers in flight") {
  AwsFixture f;
  f.http.hang("GET", kSpot);
  f.start();
  CHECK(f.http.in_flight() == 1);
  f.source->stop();
  f.http.release("GET", kSpot,
                 FakeHttpClient::answer(200, R"({"action":"stop","time":"2030-01-01T00:00:00Z"})"));
  f.clock.advance(10min);
  CHECK(f.seen.notices.empty());
  CHECK(f.clock.pending_timers() == 0);
  f.source.reset();
}
