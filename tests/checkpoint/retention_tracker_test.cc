// checkpoint/retention_tracker.h and the new parts of checkpoint/retention.h: the
// incremental tracker removes exactly what a full plan would, without reading kept
// checkpoints again; it also cleans up after failed saves and with keep_last 0, never under
// a writer; space recovery frees in the documented order; quarantined steps expire; and
// nothing ever follows a symbolic link out of the checkpoint directory.
#include "checkpoint/retention_tracker.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <random>

#include "checkpoint/paths.h"
#include "core/fault_fs.h"
#include "tests/checkpoint/step_fixture.h"
#include "tests/support/temp_dir.h"

namespace shardguard::checkpoint {
namespace {

using namespace std::chrono_literals;
using shardguard::testing::TempDir;
namespace stdfs = std::filesystem;

const shardguard::testing::StepShape kShape{4, 8};
Filesystem& posix() { return PosixFilesystem::instance(); }

CatalogEntry entry(uint64_t step, CheckpointState state) {
  return {step, "/ck/" + step_dir_name(step), state, "", std::nullopt};
}

std::vector<uint64_t> steps_of(const std::vector<Removal>& removals) {
  std::vector<uint64_t> out;
  for (const auto& r : removals) out.push_back(r.step);
  return out;
}

// The directory as a model: step -> state, newest first when listed.
struct Model {
  std::map<uint64_t, CheckpointState> steps;
  std::vector<CatalogEntry> newest_first() const {
    std::vector<CatalogEntry> out;
    for (auto it = steps.rbegin(); it != steps.rend(); ++it)
      out.push_back(entry(it->first, it->second));
    return out;
  }
};

TEST_CASE("The tracker removes exactly what a full plan would, commit by commit", "[retention]") {
  const uint32_t keep_last = GENERATE(1u, 2u, 3u, 5u);
  const uint64_t keep_every = GENERATE(0u, 500u, 1000u);
  const uint64_t resume = GENERATE(0u, 300u);
  INFO("keep_last " << keep_last << " keep_every " << keep_every << " resume " << resume);
  RetentionPolicy policy{keep_last, keep_every, {}};
  if (resume) policy.protected_steps.insert(resume);

  // Start from a directory an earlier run left: complete steps, an incomplete one in the
  // middle and a corrupt one.
  Model m;
  for (uint64_t s : {100, 200, 300, 400}) m.steps[s] = CheckpointState::kComplete;
  m.steps[250] = CheckpointState::kIncomplete;
  m.steps[150] = CheckpointState::kCorrupt;
  RetentionTracker tracker("/ck", policy);
  tracker.seed(m.newest_first());
  auto remove = [&](const Removal& r) {
    m.steps.erase(r.step);
    tracker.on_removed(r.step, {});
  };
  auto apply = [&](const std::vector<Removal>& removals) {
    // Every removal the tracker asks for, a full plan of the directory asks for too.
    auto plan = plan_retention(m.newest_first(), policy);
    for (const auto& r : removals) {
      auto d = std::find_if(plan.begin(), plan.end(),
                            [&](const RetentionDecision& d) { return d.entry.step == r.step; });
      REQUIRE(d != plan.end());
      INFO("step " << r.step << ": " << r.why << " / full plan: " << d->why);
      CHECK(d->remove);
      remove(r);
    }
  };
  apply(tracker.take_due());

  std::mt19937 rng(keep_last * 7 + keep_every + resume);
  uint64_t step = 400;
  for (int i = 0; i < 60; ++i) {
    step += 100 * (1 + rng() % 3);
    tracker.on_save_started(step);
    if (rng() % 5 == 0) {
      // A failed save: its left-over goes at once. Here the tracker knows more than a full
      // plan, which keeps an incomplete step newer than every complete one (it might be in
      // progress).
      m.steps[step] = CheckpointState::kIncomplete;
      auto removals = tracker.on_save_failed(step);
      REQUIRE(steps_of(removals) == std::vector<uint64_t>{step});
      remove(removals[0]);
      continue;
    }
    m.steps[step] = CheckpointState::kComplete;
    apply(tracker.on_committed(step, 1000));
    // Nothing a full plan would still remove is left behind (the fixed point).
    for (const auto& d : plan_retention(m.newest_first(), policy)) {
      INFO("after commit of " << step << ", step " << d.entry.step << ": " << d.why);
      CHECK_FALSE(d.remove);
    }
  }
  CHECK(tracker.steps().size() == m.steps.size());
}

TEST_CASE(
    "Incomplete steps: never the one being written; gone when abandoned, even with "
    "keep_last 0",
    "[retention]") {
  RetentionTracker tracker("/ck", {0, 0, {}});  // keep every complete checkpoint
  tracker.seed({entry(600, CheckpointState::kIncomplete), entry(500, CheckpointState::kComplete),
                entry(450, CheckpointState::kIncomplete), entry(400, CheckpointState::kComplete)});
  // The relaunched attempt resumes from 500 and is about to write 600 again: that left-over
  // is taken over by the writer, the older one goes.
  tracker.on_save_started(600);
  auto first = tracker.take_due();
  CHECK(steps_of(first) == std::vector<uint64_t>{450});
  CHECK(first[0].kind == Removal::Kind::kIncomplete);
  CHECK_THAT(first[0].why, Catch::Contains("left by an earlier run"));
  tracker.on_removed(450, {});

  CHECK(tracker.on_committed(600, 10).empty());  // keep_last 0: complete ones all stay
  tracker.on_save_started(700);
  tracker.on_save_started(800);  // an async save started before 700 finished
  auto failed = tracker.on_save_failed(700);
  CHECK(steps_of(failed) == std::vector<uint64_t>{700});
  CHECK_THAT(failed[0].why, Catch::Contains("its save failed"));
  auto ended = tracker.on_attempt_ended();
  CHECK(steps_of(ended) == std::vector<uint64_t>{800});
  CHECK_THAT(ended[0].why, Catch::Contains("abandoned"));

  SECTION("a failed removal is due again; a refused one (a link) never") {
    tracker.on_removed(700, Error(ErrorCode::kIo, "remove: Input/output error"));
    tracker.on_removed(800, Error(ErrorCode::kInvalid, "not removed: a symbolic link"));
    CHECK(steps_of(tracker.take_due()) == std::vector<uint64_t>{700});
  }
}

TEST_CASE("Corrupt steps: older ones go, newer ones stay as evidence", "[retention]") {
  RetentionTracker tracker("/ck", {2, 0, {}});
  tracker.seed({entry(300, CheckpointState::kCorrupt), entry(200, CheckpointState::kComplete),
                entry(100, CheckpointState::kCorrupt)});
  CHECK(steps_of(tracker.take_due()) == std::vector<uint64_t>{100});
  tracker.on_removed(100, {});
  auto after = tracker.on_committed(400, 10);
  REQUIRE(steps_of(after) == std::vector<uint64_t>{300});
  CHECK(after[0].kind == Removal::Kind::kCorrupt);
}

TEST_CASE("Protection holds a step out of the window until it is lifted", "[retention]") {
  RetentionTracker tracker("/ck", {1, 0, {}});
  tracker.seed({entry(100, CheckpointState::kComplete)});
  tracker.protect(100);  // resumed from
  CHECK(tracker.on_committed(200, 10).empty());
  CHECK(steps_of(tracker.on_committed(300, 10)) == std::vector<uint64_t>{200});
  tracker.on_removed(200, {});
  CHECK(steps_of(tracker.unprotect(100)) == std::vector<uint64_t>{100});
}

TEST_CASE("The tracker on a real directory: one scan, then no reads per commit", "[retention]") {
  TempDir dir;
  FakeClock clock;
  for (uint64_t s : {100, 200, 300})
    REQUIRE(shardguard::testing::write_step(posix(), clock, dir.path(), s, 2, kShape).ok());
  // An older attempt's save of 350 that never committed: one shard, no sidecars.
  REQUIRE(shardguard::testing::write_rank_of_step(posix(), dir.path(), 350, 0, 2, kShape).ok());

  FaultInjectingFilesystem fs(posix());
  RetentionTracker tracker(dir.path(), {2, 0, {}});
  REQUIRE(tracker.scan(fs, Verify::kSize).ok());
  const int reads_after_scan = fs.read_operations();
  CHECK(reads_after_scan > 0);
  auto due = tracker.take_due();
  REQUIRE(steps_of(due) == std::vector<uint64_t>{100, 350});
  CHECK(due[1].bytes > 0);  // measured at the scan
  for (const auto& r : due) tracker.on_removed(r.step, remove_checkpoint_dir(fs, r.dir));
  CHECK_FALSE(stdfs::exists(dir / "step-000000100"));
  CHECK_FALSE(stdfs::exists(dir / "step-000000350"));

  REQUIRE(shardguard::testing::write_step(posix(), clock, dir.path(), 400, 2, kShape).ok());
  tracker.on_save_started(400);
  auto removals = tracker.on_committed(400, 1234);
  CHECK(fs.read_operations() == reads_after_scan);  // decided from memory alone
  REQUIRE(steps_of(removals) == std::vector<uint64_t>{200});
  tracker.on_removed(200, remove_checkpoint_dir(fs, removals[0].dir));
  CHECK(latest_complete(posix(), dir.path(), Verify::kChecksum)->step == 400);
  CHECK(list_checkpoints(posix(), dir.path(), Verify::kSize)->size() == 2);
}

TEST_CASE("Retention never follows a symbolic link out of the checkpoint directory",
          "[retention]") {
  TempDir dir, outside;
  FakeClock clock;
  for (uint64_t s : {100, 200, 300, 400})
    REQUIRE(shardguard::testing::write_step(posix(), clock, dir.path(), s, 1, kShape).ok());
  // step-150 is a link to a complete checkpoint elsewhere; an old step by its number.
  REQUIRE(shardguard::testing::write_step(posix(), clock, outside.path(), 150, 1, kShape).ok());
  stdfs::create_directory_symlink(outside / "step-000000150", dir / "step-000000150");
  const std::string victim = outside / "step-000000150/manifest.json";

  SECTION("remove_checkpoint_dir refuses a link") {
    auto st = remove_checkpoint_dir(posix(), dir / "step-000000150");
    CHECK(st.error().code() == ErrorCode::kInvalid);
    CHECK_THAT(st.error().message(), Catch::Contains("symbolic link"));
  }
  SECTION("apply_retention stops at it") {
    auto plan = plan_retention(*list_checkpoints(posix(), dir.path(), Verify::kSize), {1, 0, {}});
    CHECK_FALSE(apply_retention(posix(), plan).ok());
  }
  SECTION("keep_symlinked_steps keeps it and the rest goes") {
    auto plan = plan_retention(*list_checkpoints(posix(), dir.path(), Verify::kSize), {1, 0, {}});
    REQUIRE(keep_symlinked_steps(posix(), plan).ok());
    auto removed = apply_retention(posix(), plan);
    REQUIRE(removed.ok());
    CHECK(*removed == 3);  // 100, 200, 300
    CHECK(stdfs::is_symlink(dir / "step-000000150"));
  }
  SECTION("the tracker notes it at the scan and never hands it out") {
    RetentionTracker tracker(dir.path(), {1, 0, {}});
    REQUIRE(tracker.scan(posix()).ok());
    auto due = tracker.take_due();
    CHECK(steps_of(due) == std::vector<uint64_t>{100, 200, 300});
  }
  CHECK(stdfs::exists(victim));
  CHECK(shardguard::testing::check_step(posix(), outside / "step-000000150", 150, kShape).ok());
}

TEST_CASE("Removing a step is crash-safe: never a complete-looking half", "[retention][fault]") {
  for (int n = 1; n <= 4; ++n) {
    TempDir dir;
    FakeClock clock;
    REQUIRE(shardguard::testing::write_step(posix(), clock, dir.path(), 100, 2, kShape).ok());
    FaultInjectingFilesystem fs(posix());
    fs.fail_nth_operation(n, EIO);
    (void)remove_checkpoint_dir(fs, dir / "step-000000100");
    REQUIRE(fs.simulate_crash().ok());
    auto e = inspect_checkpoint(posix(), dir / "step-000000100", 100, Verify::kChecksum);
    INFO("failed operation " << n << ": " << checkpoint_state_name(e.state) << " " << e.reason);
    if (stdfs::exists(dir / "step-000000100/manifest.json"))
      CHECK(e.state == CheckpointState::kComplete);  // untouched
    else
      CHECK(e.state != CheckpointState::kComplete);
  }
}

TEST_CASE("Space recovery frees garbage, then old complete steps, then quarantined ones",
          "[retention]") {
  using S = CheckpointState;
  const std::vector<StepSpace> steps = {
      {700, S::kIncomplete, "/ck/step-000000700", 5},  // newer than any complete
      {600, S::kComplete, "/ck/step-000000600", 10},   // newest complete: never
      {500, S::kComplete, "/ck/step-000000500", 10},   // keep_last 2
      {400, S::kComplete, "/ck/step-000000400", 10},
      {300, S::kComplete, "/ck/step-000000300", 10},  // the resume step: protected
      {200, S::kComplete, "/ck/step-000000200", 10},
      {150, S::kIncomplete, "/ck/step-000000150", 4},
      {50, S::kCorrupt, "/ck/step-000000050", 3},
  };
  std::vector<QuarantineEntry> quarantined(2);
  quarantined[0] = {900, "/ck/quarantine/b", 2000, "newer", "", "", 7};
  quarantined[1] = {800, "/ck/quarantine/a", 1000, "older", "", "", 7};
  const std::set<uint64_t> protect = {300};

  struct Case {
    uint64_t need;
    std::vector<uint64_t> order;
    bool enough;
  };
  auto c = GENERATE(Case{0, {}, true}, Case{3, {50}, true}, Case{12, {50, 150, 700}, true},
                    Case{13, {50, 150, 700, 200}, true}, Case{32, {50, 150, 700, 200, 400}, true},
                    Case{33, {50, 150, 700, 200, 400, 800}, true},
                    Case{46, {50, 150, 700, 200, 400, 800, 900}, true},
                    Case{47, {50, 150, 700}, false});  // cannot fit: garbage only
  INFO("need " << c.need);
  auto plan = plan_space_recovery(steps, quarantined, c.need, protect, 2);
  CHECK(steps_of(plan.removals) == c.order);
  CHECK(plan.enough == c.enough);
  CHECK(plan.bytes_reclaimable == 46);  // every candidate, whatever the need
  uint64_t freed = 0;
  for (const auto& r : plan.removals) freed += r.bytes;
  CHECK(plan.bytes_freed == freed);
  for (const auto& r : plan.removals) {
    CHECK(r.step != 600);
    CHECK(r.step != 300);
    CHECK_THAT(r.why, Catch::Contains("emergency save"));
  }
  SECTION("the reason names what the space is for") {
    auto next = plan_space_recovery(steps, quarantined, 13, protect, 2, "the next checkpoint");
    REQUIRE_FALSE(next.removals.empty());
    for (const auto& r : next.removals)
      CHECK_THAT(r.why, Catch::EndsWith("for the next checkpoint"));
  }
  if (c.order.size() >= 6) CHECK(plan.removals[5].kind == Removal::Kind::kQuarantined);
  SECTION("keep_last 0 keeps every complete step even here") {
    auto all = plan_space_recovery(steps, quarantined, 40, protect, 0);
    for (const auto& r : all.removals) CHECK(r.kind != Removal::Kind::kComplete);
  }
}

TEST_CASE("A step removed by space recovery is forgotten, even one due or in the window",
          "[retention]") {
  // keep_last 2, 300 protected (the resume step): the window holds 100 and 200, and 50 is
  // due since the scan. Space recovery (which counts the protected 300 among the newest 2)
  // removes 50 and 100 before the tracker hands either out; then the commits go on. Before
  // the fix the next commit threw from steps_.at(50): the supervisor died with exit 1 after
  // an emergency save had made room on a nearly full disk.
  RetentionPolicy policy{2, 0, {300}};
  RetentionTracker tracker("/ck", policy);
  std::vector<CatalogEntry> listing;
  for (uint64_t s : {300, 200, 100, 50}) listing.push_back(entry(s, CheckpointState::kComplete));
  tracker.seed(listing);
  for (uint64_t s : {50, 100}) tracker.on_removed(s, {});
  std::vector<Removal> handed;
  REQUIRE_NOTHROW(handed = tracker.on_committed(400, 10));
  CHECK(handed.empty());  // 200 and 400 in the window now
  REQUIRE_NOTHROW(handed = tracker.on_committed(500, 10));
  CHECK(steps_of(handed) == std::vector<uint64_t>{200});
  for (const auto& s : tracker.steps()) {
    CHECK(s.step != 50);
    CHECK(s.step != 100);
  }
}

TEST_CASE("Quarantined steps expire after quarantine_keep", "[retention]") {
  const WallTime now = from_unix_ms(1'767'323'045'000);
  std::vector<QuarantineEntry> q(3);
  q[0] = {100, "/ck/quarantine/x", to_unix_ms(now - 6 * 24h), "recent", "", "", 1};
  q[1] = {200, "/ck/quarantine/y", to_unix_ms(now - 8 * 24h), "old", "", "", 1};
  q[2] = {300, "/ck/quarantine/z", to_unix_ms(now - 7 * 24h), "exactly a week", "", "", 1};
  auto gc = plan_quarantine_gc(q, now, kDefaultQuarantineKeep);
  REQUIRE(steps_of(gc) == std::vector<uint64_t>{200, 300});  // oldest first
  CHECK(gc[0].kind == Removal::Kind::kQuarantined);
  CHECK_THAT(gc[0].why, Catch::Contains("quarantine_keep"));
  CHECK_THAT(gc[0].why, Catch::Contains("old"));
  CHECK(plan_quarantine_gc(q, now, 30 * 24h).empty());
}

// Not run by default: the per-commit cost of the old way (list and size-verify every step,
// plan, on each commit) against the tracker, with keep_every keeping every checkpoint.
TEST_CASE("Per-commit retention cost: full scan vs tracker", "[.bench]") {
  for (int kept : {42, 200}) {
    TempDir dir;
    FakeClock clock;
    for (int i = 1; i <= kept; ++i)
      REQUIRE(shardguard::testing::write_step(posix(), clock, dir.path(), i * 100, 2, kShape).ok());
    const RetentionPolicy policy{3, 100, {}};
    using Clock = std::chrono::steady_clock;
    constexpr int kRounds = 50;
    auto t0 = Clock::now();
    for (int r = 0; r < kRounds; ++r) {
      auto list = list_checkpoints(posix(), dir.path(), Verify::kSize);
      REQUIRE(list.ok());
      auto plan = plan_retention(*list, policy);
      REQUIRE(plan.size() == static_cast<size_t>(kept));
    }
    const double full_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / kRounds;
    RetentionTracker tracker(dir.path(), policy);
    REQUIRE(tracker.scan(posix()).ok());
    t0 = Clock::now();
    for (int r = 0; r < kRounds; ++r) {
      const uint64_t step = static_cast<uint64_t>(kept + 1 + r) * 100;
      tracker.on_save_started(step);
      CHECK(tracker.on_committed(step, 1000).empty());
    }
    const double tracker_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / kRounds;
    std::printf("%d kept checkpoints: full list+verify+plan %.3f ms per commit, tracker %.4f ms\n",
                kept, full_ms, tracker_ms);
  }
}

}  // namespace
}  // namespace shardguard::checkpoint
