// checkpoint/quarantine.h: a quarantined step is moved aside with its reason, never listed,
// resumed or taken as latest; its step number can be written again; unquarantine is refused
// once it has been; a crash at any point leaves the step in exactly one place, intact.
#include "checkpoint/quarantine.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <filesystem>

#include "checkpoint/catalog.h"
#include "checkpoint/paths.h"
#include "core/fault_fs.h"
#include "tests/checkpoint/step_fixture.h"
#include "tests/support/temp_dir.h"

namespace shardguard::checkpoint {
namespace {

using shardguard::testing::slurp;
using shardguard::testing::spit;
using shardguard::testing::TempDir;
namespace stdfs = std::filesystem;

const shardguard::testing::StepShape kShape{8, 16};

Filesystem& posix() { return PosixFilesystem::instance(); }

void write_steps(Filesystem& fs, const std::string& dir, std::initializer_list<uint64_t> steps) {
  FakeClock clock;
  for (uint64_t s : steps)
    REQUIRE(shardguard::testing::write_step(fs, clock, dir, s, 2, kShape).ok());
}

std::vector<uint64_t> listed_steps(const std::string& dir) {
  auto list = list_checkpoints(posix(), dir, Verify::kChecksum);
  REQUIRE(list.ok());
  std::vector<uint64_t> out;
  for (const auto& e : *list) out.push_back(e.step);
  return out;
}

// 2026-01-02T03:04:05.123Z
const WallTime kNow = from_unix_ms(1767323045123);

TEST_CASE("Quarantine moves a step aside with its reason, and nothing picks it", "[quarantine]") {
  TempDir dir;
  write_steps(posix(), dir.path(), {100, 200, 300});

  auto entry =
      quarantine_step(posix(), dir.path(), 300, "NaN loss 3 steps after resume", kNow, "test");
  REQUIRE(entry.ok());
  CHECK(entry->step == 300);
  CHECK(entry->dir == dir / "quarantine/step-000000300-20260102T030405.123Z");
  CHECK(entry->quarantined_unix_ms == to_unix_ms(kNow));
  CHECK_FALSE(stdfs::exists(dir / "step-000000300"));
  CHECK(stdfs::exists(entry->dir + "/manifest.json"));

  // The reason file: JSON with reason, time, step and who.
  auto reason = boost::json::parse(slurp(entry->dir + "/quarantine.json")).as_object();
  CHECK(reason.at("reason").as_string() == "NaN loss 3 steps after resume");
  CHECK(reason.at("step").to_number<uint64_t>() == 300);
  CHECK(reason.at("who").as_string() == "test");
  CHECK(reason.at("time").as_string() == "2026-01-02T03:04:05.123Z");
  CHECK(reason.at("quarantined_unix_ms").to_number<int64_t>() == to_unix_ms(kNow));

  // Never listed, never latest (the catalog skips quarantine/ explicitly).
  CHECK(listed_steps(dir.path()) == std::vector<uint64_t>{200, 100});
  auto latest = latest_complete(posix(), dir.path(), Verify::kChecksum);
  REQUIRE(latest.ok());
  CHECK(latest->step == 200);

  auto listed = list_quarantined(posix(), dir.path());
  REQUIRE(listed.ok());
  REQUIRE(listed->size() == 1);
  CHECK((*listed)[0].step == 300);
  CHECK((*listed)[0].reason == "NaN loss 3 steps after resume");
  CHECK((*listed)[0].who == "test");
  CHECK((*listed)[0].problem.empty());
  CHECK((*listed)[0].bytes > 2 * kShape.rows * kShape.cols * 4 / 2);
  CHECK((*listed)[0].dir == entry->dir);

  SECTION("the same step set aside twice in one millisecond gets a sequence number") {
    write_steps(posix(), dir.path(), {300});
    auto again = quarantine_step(posix(), dir.path(), 300, "again", kNow, "test");
    REQUIRE(again.ok());
    CHECK_THAT(again->dir, Catch::EndsWith("step-000000300-20260102T030405.123Z-2"));
    CHECK(list_quarantined(posix(), dir.path())->size() == 2);
  }
  SECTION("who defaults to this process") {
    write_steps(posix(), dir.path(), {400});
    auto e = quarantine_step(posix(), dir.path(), 400, "r", kNow);
    REQUIRE(e.ok());
    CHECK_THAT(e->who, Catch::StartsWith("pid " + std::to_string(::getpid()) + " on host "));
  }
}

TEST_CASE("A quarantined step number is written again; unquarantine is then refused",
          "[quarantine]") {
  TempDir dir;
  write_steps(posix(), dir.path(), {100, 200});
  REQUIRE(quarantine_step(posix(), dir.path(), 200, "first", kNow, "t").ok());

  // The rolled-back run commits step 200 anew: a new directory, not a rewrite.
  write_steps(posix(), dir.path(), {200});
  CHECK(listed_steps(dir.path()) == std::vector<uint64_t>{200, 100});
  REQUIRE(shardguard::testing::check_step(posix(), dir / "step-000000200", 200, kShape).ok());

  auto refused = unquarantine_step(posix(), dir.path(), 200);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code() == ErrorCode::kInvalid);
  CHECK_THAT(refused.error().message(), Catch::Contains("written again"));
  CHECK_THAT(refused.error().message(), Catch::Contains(dir / "step-000000200"));
  CHECK(list_quarantined(posix(), dir.path())->size() == 1);  // untouched

  // Set the new one aside too: the most recent copy comes back first.
  REQUIRE(quarantine_step(posix(), dir.path(), 200, "second", kNow + std::chrono::seconds(5), "t")
              .ok());
  auto restored = unquarantine_step(posix(), dir.path(), 200);
  REQUIRE(restored.ok());
  CHECK(restored->reason == "second");
  CHECK_FALSE(stdfs::exists(dir / "step-000000200/quarantine.json"));
  auto left = list_quarantined(posix(), dir.path());
  REQUIRE(left->size() == 1);
  CHECK((*left)[0].reason == "first");
  CHECK(unquarantine_step(posix(), dir.path(), 200).error().code() == ErrorCode::kInvalid);
}

TEST_CASE("Unquarantine brings a step back for resume", "[quarantine]") {
  TempDir dir;
  write_steps(posix(), dir.path(), {100, 200});
  REQUIRE(quarantine_step(posix(), dir.path(), 200, "suspected", kNow, "t").ok());
  CHECK(latest_complete(posix(), dir.path(), Verify::kChecksum)->step == 100);
  REQUIRE(unquarantine_step(posix(), dir.path(), 200).ok());
  CHECK(latest_complete(posix(), dir.path(), Verify::kChecksum)->step == 200);
  CHECK(shardguard::testing::check_step(posix(), dir / "step-000000200", 200, kShape).ok());
  CHECK(list_quarantined(posix(), dir.path())->empty());
  CHECK(unquarantine_step(posix(), dir.path(), 200).error().code() == ErrorCode::kNotFound);
}

TEST_CASE("Quarantine refuses what it must not move", "[quarantine]") {
  TempDir dir, outside;
  write_steps(posix(), dir.path(), {100});
  SECTION("no such step") {
    auto r = quarantine_step(posix(), dir.path(), 700, "x", kNow);
    CHECK(r.error().code() == ErrorCode::kNotFound);
    CHECK_THAT(r.error().message(), Catch::Contains(dir / "step-000000700"));
  }
  SECTION("a symbolic link is never followed, nothing is written through it") {
    write_steps(posix(), outside.path(), {500});
    stdfs::create_directory_symlink(outside / "step-000000500", dir / "step-000000500");
    auto r = quarantine_step(posix(), dir.path(), 500, "x", kNow);
    CHECK(r.error().code() == ErrorCode::kInvalid);
    CHECK_THAT(r.error().message(), Catch::Contains("symbolic link"));
    CHECK_FALSE(stdfs::exists(outside / "step-000000500/quarantine.json"));
    CHECK(stdfs::is_symlink(dir / "step-000000500"));
  }
  SECTION("a file with a step's name") {
    spit(dir / "step-000000600", "not a directory");
    CHECK(quarantine_step(posix(), dir.path(), 600, "x", kNow).error().code() ==
          ErrorCode::kInvalid);
  }
}

TEST_CASE("list_quarantined tolerates damage and ignores names that are not ours", "[quarantine]") {
  TempDir dir;
  CHECK(list_quarantined(posix(), dir.path())->empty());  // no quarantine/ at all
  write_steps(posix(), dir.path(), {100, 200});
  REQUIRE(
      quarantine_step(posix(), dir.path(), 200, "later", kNow + std::chrono::hours(1), "t").ok());
  REQUIRE(quarantine_step(posix(), dir.path(), 100, "earlier", kNow, "t").ok());
  stdfs::create_directories(dir / "quarantine/notes");
  spit(dir / "quarantine/README", "x");
  auto list = list_quarantined(posix(), dir.path());
  REQUIRE(list.ok());
  REQUIRE(list->size() == 2);
  CHECK((*list)[0].step == 100);  // oldest first, by quarantine time
  CHECK((*list)[1].step == 200);

  SECTION("a reason file that does not parse is a problem, not an error") {
    spit((*list)[0].dir + "/quarantine.json", "{\"format\":");
    auto again = list_quarantined(posix(), dir.path());
    REQUIRE(again.ok());
    CHECK_THAT((*again)[0].problem, Catch::Contains("quarantine.json"));
    CHECK((*again)[0].reason.empty());
  }
  SECTION("an unknown field is refused (strict)") {
    std::string text = slurp((*list)[1].dir + "/quarantine.json");
    text.insert(1, "\"extra\":1,");
    spit((*list)[1].dir + "/quarantine.json", text);
    CHECK_THAT((*list_quarantined(posix(), dir.path()))[1].problem, Catch::Contains("extra"));
  }
  SECTION("a lost reason file") {
    stdfs::remove((*list)[1].dir + "/quarantine.json");
    CHECK_FALSE((*list_quarantined(posix(), dir.path()))[1].problem.empty());
  }
}

TEST_CASE("The catalog never lists quarantine/ or .shardguard/", "[quarantine][catalog]") {
  TempDir dir;
  write_steps(posix(), dir.path(), {100});
  // Even holding what looks like a committed step, these are not steps.
  stdfs::create_directories(dir / "quarantine");
  stdfs::create_directories(dir / ".shardguard");
  stdfs::copy(dir / "step-000000100", dir / "quarantine/step-000000100",
              stdfs::copy_options::recursive);
  stdfs::copy(dir / "step-000000100", dir / ".shardguard/step-000000100",
              stdfs::copy_options::recursive);
  CHECK(listed_steps(dir.path()) == std::vector<uint64_t>{100});
  auto latest = latest_complete(posix(), dir.path(), Verify::kSize);
  REQUIRE(latest.ok());
  CHECK(latest->dir == dir / "step-000000100");
}

TEST_CASE("A crash during quarantine leaves the step in exactly one place, intact",
          "[quarantine][fault]") {
  // Fail the n-th mutating operation, then cut the power: whatever n, the step is either
  // still a listed complete checkpoint or a quarantined one, and its bytes check out.
  int stayed = 0, moved = 0;
  for (int n = 1; n <= 12; ++n) {
    TempDir dir;
    write_steps(posix(), dir.path(), {100});
    FaultInjectingFilesystem fs(posix());
    fs.fail_nth_operation(n, EIO);
    const bool done = quarantine_step(fs, dir.path(), 100, "crash test", kNow, "t").ok();
    REQUIRE(fs.simulate_crash().ok());
    const bool in_place = stdfs::exists(dir / "step-000000100");
    auto q = list_quarantined(posix(), dir.path());
    REQUIRE(q.ok());
    INFO("failed operation " << n << ", quarantine " << (done ? "succeeded" : "failed"));
    CHECK(in_place + q->size() == 1);
    if (done) CHECK(q->size() == 1);
    const std::string where = in_place ? dir / "step-000000100" : (*q)[0].dir;
    CHECK(shardguard::testing::check_step(posix(), where, 100, kShape).ok());
    if (in_place) CHECK(latest_complete(posix(), dir.path(), Verify::kChecksum)->step == 100);
    (in_place ? stayed : moved) += 1;
  }
  CHECK(stayed >= 8);  // every failure before the synced rename rolls back
  CHECK(moved >= 1);
}

}  // namespace
}  // namespace shardguard::checkpoint
