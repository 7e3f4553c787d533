// checkpoint/dir_history.h: counts that survive runs. The exit-78 streak (runs preempted
// without a commit) and the loop breaker's per-step counts, updated by pure functions,
// stored atomically, parsed strictly; a corrupt file is an error naming it, recoverable.
#include "checkpoint/dir_history.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "core/fault_fs.h"
#include "tests/support/temp_dir.h"

namespace shardguard::checkpoint {
namespace {

using shardguard::testing::slurp;
using shardguard::testing::spit;
using shardguard::testing::TempDir;

const WallTime kNow = from_unix_ms(1'767'323'045'123);
Filesystem& posix() { return PosixFilesystem::instance(); }

TEST_CASE("Three runs preempted without a commit make requeueing futile", "[history]") {
  DirHistory h;
  CHECK_FALSE(requeue_futile(h, 3).has_value());
  h = on_run_end(h, /*preempted=*/true, /*committed=*/false);
  h = on_run_end(h, true, false);
  CHECK_FALSE(requeue_futile(h, 3).has_value());
  h = on_run_end(h, true, false);
  auto why = requeue_futile(h, kDefaultFutileRequeueLimit);
  REQUIRE(why.has_value());
  CHECK_THAT(*why, Catch::Contains("last 3 runs"));
  CHECK_THAT(*why, Catch::Contains("will not help"));
  CHECK_FALSE(requeue_futile(h, 4).has_value());
  CHECK_FALSE(requeue_futile(h, 0).has_value());  // 0: off

  SECTION("a run that committed ends the streak") {
    CHECK(on_run_end(h, true, true).preempted_without_commit == 0);
  }
  SECTION("a run that ended otherwise ends it too") {
    CHECK(on_run_end(h, false, false).preempted_without_commit == 0);
  }
}

TEST_CASE("The loop breaker counts failed resumes per step", "[history]") {
  DirHistory h;
  h = on_attempt_end(h, {1200, std::nullopt, false});
  h = on_attempt_end(h, {1200, 1200, false});  // "committed" only the step it resumed from
  CHECK(failed_resumes(h, 1200) == 2);
  h = on_attempt_end(h, {1200, std::nullopt, /*ended_by_notice=*/true});
  CHECK(failed_resumes(h, 1200) == 2);  // a notice is not the checkpoint's fault
  h = on_attempt_end(h, {std::nullopt, std::nullopt, false});
  CHECK(failed_resumes(h, std::nullopt) == 1);  // fresh starts count apart
  CHECK(failed_resumes(h, 900) == 0);
  h = on_attempt_end(h, {1200, 1400, false});  // progress clears the step's count
  CHECK(failed_resumes(h, 1200) == 0);
  CHECK(failed_resumes(h, std::nullopt) == 1);
  h = on_attempt_end(h, {std::nullopt, 200, false});
  CHECK(failed_resumes(h, std::nullopt) == 0);

  h = on_fallback_tried(h, 1200);
  CHECK(h.fallback_tried.contains(1200));

  SECTION("bounded: the 64 highest steps are kept") {
    for (uint64_t s = 0; s < 100; ++s) h = on_attempt_end(h, {s, std::nullopt, false});
    CHECK(h.failed_resumes.size() == 64);
    CHECK(failed_resumes(h, 99) == 1);
    CHECK(failed_resumes(h, 35) == 0);
  }
}

TEST_CASE("History survives a store and load, across 'runs'", "[history]") {
  TempDir dir;
  auto empty = load_dir_history(posix(), dir.path());
  REQUIRE(empty.ok());
  CHECK(*empty == DirHistory{});

  // Three separate runs, each loading what the last stored.
  for (int run = 0; run < 3; ++run) {
    auto h = load_dir_history(posix(), dir.path());
    REQUIRE(h.ok());
    DirHistory next = on_run_end(*h, true, false);
    next = on_attempt_end(next, {1200, std::nullopt, false});
    REQUIRE(store_dir_history(posix(), dir.path(), next, kNow).ok());
  }
  auto h = load_dir_history(posix(), dir.path());
  REQUIRE(h.ok());
  CHECK(h->preempted_without_commit == 3);
  CHECK(failed_resumes(*h, 1200) == 3);
  CHECK(h->updated_unix_ms == to_unix_ms(kNow));
  CHECK(requeue_futile(*h, 3).has_value());

  DirHistory full = *h;
  full = on_attempt_end(full, {std::nullopt, std::nullopt, false});
  full = on_fallback_tried(full, 1200);
  REQUIRE(store_dir_history(posix(), dir.path(), full, kNow).ok());
  CHECK(*load_dir_history(posix(), dir.path()) == full);
}

TEST_CASE("A corrupt history is an error naming the file, and can be reset", "[history]") {
  TempDir dir;
  REQUIRE(store_dir_history(posix(), dir.path(), on_run_end({}, true, false), kNow).ok());
  const std::string path = dir / ".shardguard/history.json";
  const std::string good = slurp(path);
  auto damage =
      GENERATE(as<std::string>{}, "", "{", "[]", "{\"format\":\"shardguard-dir-history\"}",
               "unknown field", "negative count", "duplicate step");
  std::string text = damage;
  if (damage == "unknown field") {
    text = good;
    text.insert(1, "\"extra\":1,");
  } else if (damage == "negative count") {
    text = good;
    text.replace(text.find("\"preempted_without_commit\":1"), 28,
                 "\"preempted_without_commit\":-1");
  } else if (damage == "duplicate step") {
    DirHistory h;
    h = on_attempt_end(h, {5, std::nullopt, false});
    REQUIRE(store_dir_history(posix(), dir.path(), h, kNow).ok());
    text = slurp(path);
    const auto at = text.find("{\"resume_step\":5");
    const auto end = text.find('}', at) + 1;
    text.insert(end, "," + text.substr(at, end - at));
  }
  spit(path, text);
  INFO(text);
  auto r = load_dir_history(posix(), dir.path());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == ErrorCode::kCorrupt);
  CHECK_THAT(r.error().message(), Catch::Contains(path));

  auto kept = reset_dir_history(posix(), dir.path(), kNow);
  REQUIRE(kept.ok());
  CHECK(*kept == dir / ".shardguard/history.json.corrupt");
  CHECK(slurp(*kept) == text);
  DirHistory fresh;
  fresh.updated_unix_ms = to_unix_ms(kNow);
  CHECK(*load_dir_history(posix(), dir.path()) == fresh);
}

TEST_CASE("A failed store leaves the previous history", "[history][fault]") {
  TempDir dir;
  REQUIRE(store_dir_history(posix(), dir.path(), on_run_end({}, true, false), kNow).ok());
  FaultInjectingFilesystem fs(posix());
  const DirHistory two = on_run_end(on_run_end({}, true, false), true, false);
  // create the directory, open the temp file, write, fsync, rename: any failure before the
  // rename leaves the old file whole (and no temp file).
  for (int n = 1; n <= 5; ++n) {
    fs.fail_nth_operation(n, EIO);
    auto st = store_dir_history(fs, dir.path(), two, kNow);
    fs.clear_faults();
    INFO("failed operation " << n);
    CHECK_FALSE(st.ok());
    auto h = load_dir_history(posix(), dir.path());
    REQUIRE(h.ok());
    CHECK(h->preempted_without_commit == 1);
    size_t files = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir / ".shardguard")) {
      (void)e;
      ++files;
    }
    CHECK(files == 1);
  }
  REQUIRE(store_dir_history(fs, dir.path(), two, kNow).ok());
  CHECK(load_dir_history(posix(), dir.path())->preempted_without_commit == 2);
}

}  // namespace
}  // namespace shardguard::checkpoint
