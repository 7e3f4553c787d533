// Crash consistency with the fault-injecting filesystem: a power cut after every single
// operation of a save + commit never yields a checkpoint that the catalog calls complete
// but that cannot be loaded, and never harms the checkpoint committed before.
#include <catch2/catch.hpp>

#include <filesystem>

#include "checkpoint/catalog.h"
#include "core/fault_fs.h"
#include "tests/checkpoint/step_fixture.h"
#include "tests/support/temp_dir.h"

using namespace shardguard;
using namespace shardguard::checkpoint;
using shardguard::testing::check_step;
using shardguard::testing::StepShape;
using shardguard::testing::TempDir;
using shardguard::testing::write_step;

TEST_CASE("A crash between any two operations of save + commit is never a false complete",
          "[checkpoint][fault]") {
  auto& posix = PosixFilesystem::instance();
  auto& clock = RealClock::instance();
  const StepShape shape{16, 300};
  const uint32_t world = GENERATE(1u, 3u);

  int total = 0;
  {
    TempDir probe;
    FaultInjectingFilesystem counting(posix);
    REQUIRE(write_step(counting, clock, probe.path(), 10, world, shape).ok());
    REQUIRE(write_step(counting, clock, probe.path(), 20, world, shape).ok());
    total = counting.operations();
  }
  int complete_after_crash = 0;
  for (int n = 1; n <= total; ++n) {
    TempDir dir;
    FaultInjectingFilesystem fs(posix);
    // The machine dies at operation n: it and everything after it never happen.
    fs.fail_nth_operation(n, EIO, /*sticky=*/true);
    auto first = write_step(fs, clock, dir.path(), 10, world, shape);
    auto second = first.ok() ? write_step(fs, clock, dir.path(), 20, world, shape) : first;
    REQUIRE(fs.simulate_crash().ok());

    INFO("crash at operation " << n << " of " << total << ", world " << world);
    auto entries = list_checkpoints(posix, dir.path(), Verify::kChecksum);
    REQUIRE(entries.ok());
    for (const auto& e : *entries) {
      INFO("step " << e.step << " is " << checkpoint_state_name(e.state) << ": " << e.reason);
      CHECK(e.state != CheckpointState::kCorrupt);
      if (e.state == CheckpointState::kComplete) {
        ++complete_after_crash;
        auto st = check_step(posix, e.dir, e.step, shape);
        CHECK(st.ok());
        if (!st.ok()) FAIL(st.error().message());
      }
    }
    // Once step 10's commit returned, it survives whatever happens to step 20.
    if (first.ok()) {
      auto latest = latest_complete(posix, dir.path(), Verify::kChecksum);
      REQUIRE(latest.ok());
      CHECK(latest->step >= 10);
    }
  }
  CHECK(complete_after_crash > 0);
}
