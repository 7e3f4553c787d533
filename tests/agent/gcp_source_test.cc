// GcpSource against FakeHttpClient + FakeClock: the start-up read, hanging GETs with ETags,
// deadlines, and "no information" answers.
#include "agent/gcp_source.h"

#include <catch2/catch.hpp>

#include "tests/agent/notice_collector.h"
#include "tests/support/fake_http.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::agent;
using shardguard::testing::FakeHttpClient;

namespace {

constexpr char kPreempted[] = "/computeMetadata/v1/instance/preempted";
constexpr char kMaintenance[] = "/computeMetadata/v1/instance/maintenance-event";

bool is_wait(const io::HttpRequest& r) {
  return r.url.find("wait_for_change=true") != std::string::npos;
}

// A metadata key whose value the test sets; plain GETs answer at once, hanging GETs with the
// current ETag are parked until set() releases them (or their timeout passes).
struct FakeKey {
  FakeHttpClient& http;
  std::string path;
  std::string value;
  int version = 1;

  std::string etag() const { return "etag-" + std::to_string(version); }
  FakeHttpClient::Reply reply() const {
    return FakeHttpClient::answer(200, value, {{"ETag", etag()}, {"Metadata-Flavor", "Google"}});
  }
  void install() {
    http.route("GET", path, [this](const io::HttpRequest& r) {
      if (is_wait(r) && r.url.find("last_etag=" + etag()) != std::string::npos) {
        return std::optional<FakeHttpClient::Reply>();
      }
      return std::optional(reply());
    });
  }
  void set(std::string v) {
    value = std::move(v);
    ++version;
    http.release("GET", path, reply());
  }
};

struct GcpFixture {
  FakeClock clock;
  FakeHttpClient http{clock};
  GcpSourceConfig config;
  testing::NoticeCollector seen;
  std::unique_ptr<GcpSource> source;
  FakeKey preempted{http, kPreempted, "FALSE"};
  FakeKey maintenance{http, kMaintenance, "NONE"};

  GcpFixture() {
    preempted.install();
    maintenance.install();
  }
  void start() {
    source = std::make_unique<GcpSource>(config, http, clock, clock, make_random(3));
    source->start(seen.sink());
    clock.advance(0s);
  }
};

}  // namespace

TEST_CASE("gcp: the start-up read catches a VM that is already preempted") {
  GcpFixture f;
  f.preempted.value = "TRUE";
  f.start();
  REQUIRE(f.seen.notices.size() == 1);
  const Notice& n = f.seen.notices[0];
  CHECK(n.source == "gcp");
  CHECK(n.kind == "preempted");
  CHECK(n.is_preemption);
  CHECK(n.deadline == f.clock.wall_now() + 30s);
  const io::HttpRequest& first = f.http.requests().front();
  CHECK_FALSE(is_wait(first));
  CHECK(first.headers.get("Metadata-Flavor") == "Google");
  CHECK(first.timeout == f.config.request_timeout);
}

TEST_CASE("gcp: then a hanging GET with last_etag and an HTTP timeout above timeout_sec") {
  GcpFixture f;
  f.start();
  CHECK(f.seen.notices.empty());
  REQUIRE(f.http.in_flight() == 2);  // both keys are being watched
  const io::HttpRequest& wait = f.http.requests().back();
  CHECK(is_wait(wait));
  CHECK_THAT(wait.url, Catch::Contains("last_etag=etag-1"));
  CHECK_THAT(wait.url, Catch::Contains("timeout_sec=60"));
  CHECK(wait.timeout == 70s);

  f.clock.advance(12s);
  f.preempted.set("TRUE");
  f.clock.advance(0s);
  REQUIRE(f.seen.notices.size() == 1);
  CHECK(f.seen.notices[0].deadline == f.clock.wall_now() + 30s);
  f.clock.advance(5min);
  CHECK(f.seen.notices.size() == 1);
}

TEST_CASE("gcp: a hanging GET that times out is retried, with no notice") {
  GcpFixture f;
  f.config.wait_timeout = 5s;
  f.config.wait_margin = 1s;
  f.start();
  f.clock.advance(6s);  // the HTTP timeouts fire
  CHECK(f.source->counters().errors == 2);
  f.clock.advance(60s);
  CHECK(f.seen.notices.empty());
  f.maintenance.set("TERMINATE_ON_HOST_MAINTENANCE");
  f.clock.advance(60s);
  REQUIRE(f.seen.notices.size() == 1);
  CHECK(f.seen.notices[0].kind == "maintenance");
  CHECK(f.seen.notices[0].is_preemption);
}

TEST_CASE("gcp: an unchanged answer (timeout_sec passed) re-watches, not too often") {
  GcpFixture f;
  f.http.route("GET", kPreempted, [&](const io::HttpRequest&) {
    return std::optional(FakeHttpClient::answer(200, "FALSE", {{"ETag", "same"}}));
  });
  f.start();
  f.clock.advance(10s);
  CHECK(f.http.count("GET", kPreempted) <= 12);  // min_rewatch = 1 s
  CHECK(f.source->counters().errors == 0);
  CHECK(f.seen.notices.empty());
}

TEST_CASE("gcp: maintenance events: terminate, migrate, and a second episode") {
  GcpFixture f;
  f.start();
  f.maintenance.set("MIGRATE_ON_HOST_MAINTENANCE");
  f.clock.advance(0s);
  REQUIRE(f.seen.notices.size() == 1);
  CHECK(f.seen.notices[0].kind == "migrate");
  CHECK_FALSE(f.seen.notices[0].is_preemption);
  f.maintenance.set("NONE");
  f.clock.advance(2s);
  f.maintenance.set("TERMINATE_ON_HOST_MAINTENANCE");
  f.clock.advance(0s);
  REQUIRE(f.seen.notices.size() == 2);
  CHECK(f.seen.notices[1].kind == "maintenance");
  CHECK(f.seen.notices[1].deadline == f.clock.wall_now() + 60s);
  f.maintenance.set("NONE");
  f.clock.advance(2s);
  f.maintenance.set("TERMINATE_ON_HOST_MAINTENANCE");
  f.clock.advance(0s);
  CHECK(f.seen.notices.size() == 3);
}

TEST_CASE("gcp: no-information answers never make a notice") {
  GcpFixture f;
  const std::string label =
      GENERATE(as<std::string>{}, "503", "403", "404", "500", "bad-value", "refused");
  auto bad = [&](const std::string& path) {
    if (label == "bad-value") return f.http.respond("GET", path, 200, "<html>TRUE</html>");
    if (label == "refused") {
      return f.http.fail("GET", path, Error(ErrorCode::kIo, "Connection refused"));
    }
    f.http.respond("GET", path, std::stoi(label), "TRUE");
  };
  bad(kPreempted);
  bad(kMaintenance);
  f.start();
  f.clock.advance(2min);
  CHECK(f.seen.notices.empty());
  CHECK(f.source->counters().errors >= 4);
  // Backoff, but never more than 2 s (2 x min_rewatch) between two: GCP gives 30 s of notice.
  CHECK(f.http.count("GET", kPreempted) < 120);
  CHECK(f.http.count("GET", kPreempted) >= 60);
}

TEST_CASE("gcp: a 503 burst during the watch is ridden out and the change still seen") {
  GcpFixture f;
  f.start();
  f.http.respond("GET", kPreempted, 503);
  f.http.release("GET", kPreempted, FakeHttpClient::answer(503));
  f.clock.advance(10s);
  CHECK(f.seen.notices.empty());
  f.preempted.value = "TRUE";
  ++f.preempted.version;
  f.preempted.install();
  f.clock.advance(31s);
  REQUIRE(f.seen.notices.size() == 1);
  CHECK(f.seen.notices[0].kind == "preempted");
}
