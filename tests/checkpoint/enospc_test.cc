// A full disk is its own cause: on a small loop-mounted ext4 (O_DIRECT and all), a save that
// does not fit fails with ErrorCode::kNoSpace from the writer and from the commit, leaves
// no temporary file or orphan shard behind, and earlier checkpoints stay intact and
// resumable. Once space is back, retention clears the failed step and the save succeeds.
// Skips (with a message) where loop mounts are not permitted.
#include <catch2/catch.hpp>
#include <filesystem>

#include "checkpoint/catalog.h"
#include "checkpoint/paths.h"
#include "checkpoint/retention_tracker.h"
#include "core/fault_fs.h"
#include "tests/checkpoint/step_fixture.h"
#include "tests/support/loop_fs.h"

namespace shardguard::checkpoint {
namespace {

using shardguard::testing::LoopFs;
namespace stdfs = std::filesystem;

// 1 MiB per checkpoint (two ranks of 512 KiB).
const shardguard::testing::StepShape kShape{256, 1024};
Filesystem& posix() { return PosixFilesystem::instance(); }

std::vector<std::string> leftovers(const std::string& dir) {
  std::vector<std::string> out;
  if (!stdfs::exists(dir)) return out;
  for (const auto& e : stdfs::recursive_directory_iterator(dir))
    if (is_temp_name(e.path().filename().string())) out.push_back(e.path());
  return out;
}

void check_earlier_intact(const std::string& dir) {
  for (uint64_t s : {100, 200}) {
    const std::string step_dir = join_path(dir, step_dir_name(s));
    CHECK(inspect_checkpoint(posix(), step_dir, s, Verify::kChecksum).state ==
          CheckpointState::kComplete);
    CHECK(shardguard::testing::check_step(posix(), step_dir, s, kShape).ok());
  }
  auto latest = latest_complete(posix(), dir, Verify::kChecksum);
  REQUIRE(latest.ok());
  CHECK(latest->step == 200);
}

TEST_CASE("A save on a full disk fails with kNoSpace and leaves nothing behind",
          "[enospc][integration]") {
  std::string why;
  auto disk = LoopFs::mount(64, &why);
  if (!disk) {
    WARN("skipped: " << why);
    return;
  }
  const std::string dir = disk->path() + "/ckpt";
  FakeClock clock;
  for (uint64_t s : {100, 200})
    REQUIRE(shardguard::testing::write_step(posix(), clock, dir, s, 2, kShape).ok());

  // How much room is left decides where the save breaks: the shard's reservation, its
  // blocks, or the small files after it. Every one must end the same way.
  // Measured here: 0 fails creating the step directory, 64 and 300 KiB rank 0's
  // preallocation, 520 KiB a write of rank 0's shard, 600 KiB rank 1's preallocation after
  // rank 0 published.
  const uint64_t leave = GENERATE(uint64_t{0}, uint64_t{64} << 10, uint64_t{300} << 10,
                                  uint64_t{520} << 10, uint64_t{600} << 10);
  INFO("left free: about " << leave << " bytes");
  REQUIRE(disk->fill(leave));

  auto saved = shardguard::testing::write_step(posix(), clock, dir, 300, 2, kShape);
  REQUIRE_FALSE(saved.ok());
  INFO(saved.error().message());
  CHECK(saved.error().code() == ErrorCode::kNoSpace);
  CHECK_THAT(saved.error().message(), Catch::Contains("No space left on device"));
  CHECK(leftovers(dir).empty());
  // No shard without its sidecar: what a rank published is complete, the rest is gone.
  const std::string step300 = dir + "/step-000000300";
  for (uint32_t r = 0; r < 2; ++r) {
    const bool shard = stdfs::exists(step300 + "/" + shard_file_name(r, 2));
    const bool sidecar = stdfs::exists(step300 + "/" + sidecar_name(r));
    CHECK(shard == sidecar);
  }
  CHECK_FALSE(stdfs::exists(step300 + "/manifest.json"));
  check_earlier_intact(dir);

  // Space comes back: the failed step's left-overs go, and the same step saves.
  disk->unfill();
  RetentionTracker tracker(dir, {3, 0, {}});
  REQUIRE(tracker.scan(posix()).ok());
  for (const auto& r : tracker.take_due()) {
    CHECK(r.step == 300);
    tracker.on_removed(r.step, remove_checkpoint_dir(posix(), r.dir));
  }
  REQUIRE(shardguard::testing::write_step(posix(), clock, dir, 300, 2, kShape).ok());
  CHECK(shardguard::testing::check_step(posix(), step300, 300, kShape).ok());
}

TEST_CASE("Whichever write hits the full disk, the writer leaves no temp file or orphan shard",
          "[enospc]") {
  // The fault filesystem fails the n-th operation with ENOSPC (the disk stays full): every
  // point of a rank's save, including the sidecar after the shard was published.
  shardguard::testing::TempDir dir;
  FakeClock clock;
  REQUIRE(shardguard::testing::write_step(posix(), clock, dir.path(), 100, 1, {8, 16}).ok());
  int failures = 0;
  for (int n = 1;; ++n) {
    FaultInjectingFilesystem fs(posix());
    fs.fail_nth_operation(n, ENOSPC, /*sticky=*/true);
    auto st = shardguard::testing::write_rank_of_step(fs, dir.path(), 200, 0, 1, {8, 16});
    if (st.ok()) break;  // n is past the last operation of a save
    ++failures;
    INFO("operation " << n << ": " << st.error().message());
    CHECK(st.error().code() == ErrorCode::kNoSpace);
    CHECK(leftovers(dir.path()).empty());
    CHECK_FALSE(stdfs::exists(dir / "step-000000200/shard-00000-of-00001.safetensors"));
    CHECK_FALSE(stdfs::exists(dir / "step-000000200/rank-00000.json"));
    REQUIRE(n < 100);
  }
  CHECK(failures >= 8);  // open, preallocate, write, fsync, rename, the sidecar's steps ...
  CHECK(latest_complete(posix(), dir.path(), Verify::kChecksum)->step == 100);
}

TEST_CASE("A commit whose manifest does not fit fails with kNoSpace, leaving no temp file",
          "[enospc][integration]") {
  std::string why;
  auto disk = LoopFs::mount(64, &why);
  if (!disk) {
    WARN("skipped: " << why);
    return;
  }
  const std::string dir = disk->path() + "/ckpt";
  FakeClock clock;
  for (uint64_t s : {100, 200})
    REQUIRE(shardguard::testing::write_step(posix(), clock, dir, s, 2, kShape).ok());
  for (uint32_t r = 0; r < 2; ++r)
    REQUIRE(shardguard::testing::write_rank_of_step(posix(), dir, 300, r, 2, kShape).ok());
  REQUIRE(disk->fill(0));

  CommitOptions c;
  c.checkpoint_dir = dir;
  c.job_id = "crash-job";
  c.step = 300;
  c.world_size = 2;
  c.timeout = std::chrono::seconds(0);
  auto m = commit_checkpoint(posix(), clock, c);
  REQUIRE_FALSE(m.ok());
  INFO(m.error().message());
  CHECK(m.error().code() == ErrorCode::kNoSpace);
  CHECK(leftovers(dir).empty());
  CHECK_FALSE(stdfs::exists(dir + "/step-000000300/manifest.json"));
  CHECK(inspect_checkpoint(posix(), dir + "/step-000000300", 300, Verify::kSize).state ==
        CheckpointState::kIncomplete);
  check_earlier_intact(dir);

  disk->unfill();
  REQUIRE(commit_checkpoint(posix(), clock, c).ok());
  CHECK(latest_complete(posix(), dir, Verify::kChecksum)->step == 300);
}

}  // namespace
}  // namespace shardguard::checkpoint
