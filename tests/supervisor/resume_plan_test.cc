// supervisor/resume_plan.h on real checkpoint directories: which checkpoint an attempt
// resumes from (skipped steps, the divergence guard's suspect range, an unfinished newest
// step), what `run --resume-from` sets aside, and where attempt numbers go on.
#include "supervisor/resume_plan.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "checkpoint/quarantine.h"
#include "tests/checkpoint/step_fixture.h"
#include "tests/support/temp_dir.h"

namespace shardguard::supervisor {
namespace {

using shardguard::testing::TempDir;

const shardguard::testing::StepShape kShape{8, 16};
const WallTime kNow = from_unix_ms(1767323045123);

Filesystem& posix() { return PosixFilesystem::instance(); }

void write_steps(const std::string& dir, std::initializer_list<uint64_t> steps, uint64_t attempt = 0) {
  FakeClock clock;
  for (uint64_t s : steps)
    REQUIRE(shardguard::testing::write_step(posix(), clock, dir, s, 2, kShape, attempt).ok());
}

std::vector<uint64_t> listed(const std::string& dir) {
  auto list = checkpoint::list_checkpoints(posix(), dir, checkpoint::Verify::kSize);
  REQUIRE(list.ok());
  std::vector<uint64_t> out;
  for (const auto& e : *list) out.push_back(e.step);
  return out;
}

std::vector<uint64_t> steps_of(const std::vector<checkpoint::CatalogEntry>& entries) {
  std::vector<uint64_t> out;
  for (const auto& e : entries) out.push_back(e.step);
  return out;
}

TEST_CASE("choose_resume: the newest complete checkpoint not skipped", "[resume_plan]") {
  TempDir dir;
  write_steps(dir.path(), {100, 200, 300});

  auto plain = choose_resume(posix(), dir.path(), checkpoint::Verify::kChecksum, {}, std::nullopt);
  CHECK(plain.error.empty());
  REQUIRE(plain.chosen);
  CHECK(plain.chosen->step == 300);
  CHECK(plain.skipped.empty());

  // Restarts from 300 made no progress: 200, and 300 is reported with why.
  auto skip = choose_resume(posix(), dir.path(), checkpoint::Verify::kSize, {300}, std::nullopt);
  REQUIRE(skip.chosen);
  CHECK(skip.chosen->step == 200);
  REQUIRE(steps_of(skip.skipped) == std::vector<uint64_t>{300});
  CHECK(skip.skipped[0].reason == "restarts from it made no progress");

  // The guard's suspect range (from 200 on) is neither chosen nor reported.
  auto guard = choose_resume(posix(), dir.path(), checkpoint::Verify::kSize, {}, 200);
  REQUIRE(guard.chosen);
  CHECK(guard.chosen->step == 100);
  CHECK(guard.skipped.empty());

  // Everything suspect: a fresh start, not an error.
  auto none = choose_resume(posix(), dir.path(), checkpoint::Verify::kSize, {}, 100);
  CHECK_FALSE(none.chosen);
  CHECK(none.error.empty());
}

TEST_CASE("resume_found: what the decision core is told of a choice", "[resume_plan]") {
  TempDir dir;
  write_steps(dir.path(), {100, 200});

  auto chosen = resume_found(3, choose_resume(posix(), dir.path(), checkpoint::Verify::kSize, {200},
                                              std::nullopt));
  CHECK(chosen.epoch == 3);
  CHECK(chosen.step == std::optional<uint64_t>(100));
  CHECK(chosen.manifest == dir / "step-000000100/manifest.json");
  CHECK(chosen.skipped_complete);  // 200 was complete, passed over for no progress

  auto fresh = resume_found(4, choose_resume(posix(), dir.path(), checkpoint::Verify::kSize, {},
                                             uint64_t{100}));
  CHECK_FALSE(fresh.step);
  CHECK(fresh.manifest.empty());
  CHECK_FALSE(fresh.skipped_complete);  // the guard's range is not "skipped"
}

TEST_CASE("choose_resume: an unfinished or damaged newer step is passed over and reported",
          "[resume_plan]") {
  TempDir dir;
  write_steps(dir.path(), {100, 200});
  // Step 300: rank 0 wrote its shard, no manifest was committed.
  REQUIRE(shardguard::testing::write_rank_of_step(posix(), dir.path(), 300, 0, 2, kShape).ok());
  // Step 200: one byte of a shard flipped (found by the checksum mode).
  for (const auto& f : std::filesystem::directory_iterator(dir / "step-000000200"))
    if (f.path().extension() == ".safetensors") {
      std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
      io.seekp(-1, std::ios::end);
      io.put('\x7f');
      break;
    }

  auto r = choose_resume(posix(), dir.path(), checkpoint::Verify::kChecksum, {}, std::nullopt);
  REQUIRE(r.chosen);
  CHECK(r.chosen->step == 100);
  REQUIRE(steps_of(r.skipped) == std::vector<uint64_t>{300, 200});
  CHECK(r.skipped[0].state != checkpoint::CheckpointState::kComplete);
  CHECK(r.skipped[1].state == checkpoint::CheckpointState::kCorrupt);
  CHECK_FALSE(r.skipped[1].reason.empty());
}

TEST_CASE("roll_back: --resume-from STEP sets every newer step aside, newest first",
          "[resume_plan]") {
  TempDir dir;
  write_steps(dir.path(), {100, 200, 300, 400});

  auto aside = roll_back(posix(), dir.path(), 200, false, kNow);
  REQUIRE(aside.ok());
  CHECK(*aside == std::vector<uint64_t>{400, 300});
  CHECK(listed(dir.path()) == std::vector<uint64_t>{200, 100});
  auto q = checkpoint::list_quarantined(posix(), dir.path());
  REQUIRE(q.ok());
  REQUIRE(q->size() == 2);
  for (const auto& e : *q) CHECK(e.reason == "rolled back by shardguard run --resume-from 200");

  // Nothing newer: nothing to set aside.
  auto again = roll_back(posix(), dir.path(), 200, false, kNow);
  REQUIRE(again.ok());
  CHECK(again->empty());
}

TEST_CASE("roll_back: a step that is not there or not complete is refused, naming it",
          "[resume_plan]") {
  TempDir dir;
  write_steps(dir.path(), {100, 200});
  REQUIRE(shardguard::testing::write_rank_of_step(posix(), dir.path(), 300, 0, 2, kShape).ok());

  auto missing = roll_back(posix(), dir.path(), 150, false, kNow);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error().message(),
             Catch::Contains("--resume-from 150: no checkpoint of that step in '" + dir.path()));

  auto partial = roll_back(posix(), dir.path(), 300, false, kNow);
  REQUIRE_FALSE(partial.ok());
  CHECK_THAT(partial.error().message(), Catch::Contains("--resume-from 300: step 300 is"));
  CHECK(listed(dir.path()) == std::vector<uint64_t>{300, 200, 100});  // nothing moved
}

TEST_CASE("roll_back: --resume-from none wants --fresh before it sets anything aside",
          "[resume_plan]") {
  TempDir dir;
  write_steps(dir.path(), {100, 200});

  auto refused = roll_back(posix(), dir.path(), std::nullopt, false, kNow);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message(),
             Catch::Contains("holds 2 checkpoint(s), the newest of step 200; add --fresh"));
  CHECK(listed(dir.path()).size() == 2);

  auto fresh = roll_back(posix(), dir.path(), std::nullopt, true, kNow);
  REQUIRE(fresh.ok());
  CHECK(*fresh == std::vector<uint64_t>{200, 100});
  CHECK(listed(dir.path()).empty());

  TempDir empty;
  auto nothing = roll_back(posix(), empty.path(), std::nullopt, false, kNow);
  REQUIRE(nothing.ok());
  CHECK(nothing->empty());
}

TEST_CASE("first_epoch: one past every attempt in the events and the manifests",
          "[resume_plan]") {
  TempDir ckpt;
  CHECK(first_epoch(posix(), {}, ckpt.path()) == 0);  // neither exists yet

  const auto past = parse_events(
      "{\"time_unix_ms\":1,\"event\":\"launch\",\"attempt\":\"4\"}\n"
      "{\"time_unix_ms\":2,\"event\":\"launch\",\"attempt\":\"four\"}\n"   // hand-edited
      "not json at all\n"
      "{\"time_unix_ms\":3,\"event\":\"launch\",\"attempt\":\"18446744073709551615\"}\n"
      "{\"time_unix_ms\":4,\"event\":\"exit\",\"attempt\":\"90\"}");       // not a launch
  CHECK(past.size() == 4);  // the last line needs no newline
  CHECK(first_epoch(posix(), past, ckpt.path()) == 5);

  write_steps(ckpt.path(), {100}, 7);  // a checkpoint committed by attempt 7
  CHECK(first_epoch(posix(), past, ckpt.path()) == 8);
}

TEST_CASE("last_save_time: the newest timed commit in the events", "[resume_plan]") {
  CHECK_FALSE(last_save_time({}));
  const auto past = parse_events(
      "{\"time_unix_ms\":1,\"event\":\"checkpoint_committed\",\"step\":10,\"seconds\":12.5}\n"
      "{\"time_unix_ms\":2,\"event\":\"checkpoint_committed\",\"step\":20,\"seconds\":3.25}\n"
      "{\"time_unix_ms\":3,\"event\":\"save_window\",\"seconds\":99}\n"           // not a commit
      "{\"time_unix_ms\":4,\"event\":\"checkpoint_committed\",\"step\":30,\"seconds\":0}\n"   // untimed
      "{\"time_unix_ms\":5,\"event\":\"checkpoint_committed\",\"step\":40,\"seconds\":\"x\"}\n"
      "{\"time_unix_ms\":6,\"event\":\"checkpoint_committed\",\"step\":50,\"seconds\":-4}\n");
  auto t = last_save_time(past);
  REQUIRE(t);
  CHECK(std::chrono::duration<double>(*t).count() == Approx(3.25));
}

}  // namespace
}  // namespace shardguard::supervisor
