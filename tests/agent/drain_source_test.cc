// DrainSource on a real temp directory with a FakeClock, and the drain-file helpers.
#include "agent/drain_source.h"

#include <catch2/catch.hpp>

#include "tests/agent/notice_collector.h"
#include "tests/support/temp_dir.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::agent;
using shardguard::testing::TempDir;

namespace {

struct DrainFixture {
  TempDir dir;
  FakeClock clock;
  DrainSourceConfig config;
  testing::NoticeCollector seen;
  std::unique_ptr<DrainSource> source;

  DrainFixture() { config.path = dir / "run/drain"; }
  void start() {
    source = std::make_unique<DrainSource>(config, PosixFilesystem::instance(), clock, clock);
    source->start(seen.sink());
    clock.advance(0s);
  }
};

}  // namespace

TEST_CASE("drain: nothing happens while there is no drain file") {
  DrainFixture f;
  f.start();
  f.clock.advance(10s);
  CHECK(f.seen.notices.empty());
  CHECK(f.source->counters().polls >= 10);
  CHECK(f.source->counters().errors == 0);
}

TEST_CASE("drain: a request written by the helper is one notice with its deadline") {
  DrainFixture f;
  f.start();
  f.clock.advance(3s);
  const WallTime deadline = from_unix_ms(to_unix_ms(f.clock.wall_now() + 5min));
  REQUIRE(
      write_drain_request(PosixFilesystem::instance(), f.config.path, deadline, "kernel upgrade")
          .ok());
  f.clock.advance(f.config.poll_interval);
  REQUIRE(f.seen.notices.size() == 1);
  const Notice& n = f.seen.notices[0];
  CHECK(n.source == "drain");
  CHECK(n.is_preemption);
  CHECK(n.deadline == deadline);
  CHECK(n.detail == "kernel upgrade");
  f.clock.advance(10s);
  CHECK(f.seen.notices.size() == 1);
}

TEST_CASE("drain: an empty file means the default grace") {
  DrainFixture f;
  std::filesystem::create_directories(f.dir / "run");
  testing::spit(f.config.path, "");
  f.start();
  REQUIRE(f.seen.notices.size() == 1);
  CHECK(f.seen.notices[0].deadline == f.clock.wall_now() + f.config.default_grace);
}

TEST_CASE("drain: a garbled file is still a drain, with the default grace") {
  DrainFixture f;
  std::filesystem::create_directories(f.dir / "run");
  testing::spit(f.config.path, "{\"deadline_unix_ms\": tomorrow");
  f.start();
  REQUIRE(f.seen.notices.size() == 1);
  CHECK(f.seen.notices[0].deadline == f.clock.wall_now() + f.config.default_grace);
  CHECK(f.source->counters().errors == 1);
}

TEST_CASE("drain: removing the file re-arms; a new request is a new notice") {
  DrainFixture f;
  f.start();
  auto& fs = PosixFilesystem::instance();
  REQUIRE(write_drain_request(fs, f.config.path, std::nullopt, "first").ok());
  f.clock.advance(1s);
  REQUIRE(f.seen.notices.size() == 1);
  REQUIRE(fs.remove(f.config.path).ok());
  f.clock.advance(1s);
  REQUIRE(write_drain_request(fs, f.config.path, std::nullopt, "first").ok());
  f.clock.advance(1s);
  CHECK(f.seen.notices.size() == 2);
}

TEST_CASE("drain: parse_drain_request") {
  CHECK_FALSE(parse_drain_request(" \n")->deadline.has_value());
  auto r = parse_drain_request(R"({"deadline_unix_ms": 1700000000123, "reason": "x"})");
  REQUIRE(r.ok());
  CHECK(to_unix_ms(*r->deadline) == 1700000000123);
  CHECK(r->reason == "x");
  CHECK_FALSE(parse_drain_request("[1]").ok());
  CHECK_FALSE(parse_drain_request(R"({"deadline_unix_ms": "soon"})").ok());
  CHECK_FALSE(parse_drain_request(R"({"reason": 3})").ok());
}
