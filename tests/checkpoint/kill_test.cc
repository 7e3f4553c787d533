// kill -9 of a real writer process at random moments, then the catalog must pick only
// checkpoints that load bit-exactly. 20 kills in the default run; 200 under the `slow`
// label (SHARDGUARD_KILL_COUNT).
#include <catch2/catch.hpp>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "checkpoint/catalog.h"
#include "tests/checkpoint/step_fixture.h"
#include "tests/support/temp_dir.h"

extern char** environ;

using namespace shardguard;
using namespace shardguard::checkpoint;

namespace {

int kill_count() {
  if (const char* n = std::getenv("SHARDGUARD_KILL_COUNT")) return std::atoi(n);
  return 20;
}

pid_t spawn_writer(const std::string& dir, uint32_t world, uint64_t first_step) {
  std::string world_s = std::to_string(world), step_s = std::to_string(first_step);
  std::string bin = SG_CKPT_WRITER;
  char* argv[] = {bin.data(), const_cast<char*>(dir.c_str()), world_s.data(), step_s.data(),
                  nullptr};
  pid_t pid = -1;
  REQUIRE(::posix_spawn(&pid, bin.c_str(), nullptr, nullptr, argv, environ) == 0);
  return pid;
}

}  // namespace

TEST_CASE("kill -9 of a writer at random moments never yields a bad resume point",
          "[checkpoint][integration]") {
  testing::TempDir dir;
  auto& fs = PosixFilesystem::instance();
  const testing::StepShape shape{64, 4096};
  std::mt19937 rng(12345);
  const int kills = kill_count();
  uint64_t next_step = 1;
  int resumable = 0;
  int left_incomplete = 0;  // kills that landed in the middle of a save
  for (int i = 0; i < kills; ++i) {
    const uint32_t world = 1 + rng() % 4;
    pid_t pid = spawn_writer(dir.path(), world, next_step);
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 120));
    REQUIRE(::kill(pid, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    INFO("kill " << i);
    REQUIRE(WIFSIGNALED(status));  // it was still running: it never failed by itself

    auto entries = list_checkpoints(fs, dir.path(), Verify::kChecksum);
    REQUIRE(entries.ok());
    for (const auto& e : *entries) {
      INFO("step " << e.step << " " << checkpoint_state_name(e.state) << ": " << e.reason);
      CHECK(e.state != CheckpointState::kCorrupt);
      if (e.state == CheckpointState::kIncomplete && e.step >= next_step) ++left_incomplete;
      if (e.state == CheckpointState::kComplete) {
        auto st = testing::check_step(fs, e.dir, e.step, shape);
        if (!st.ok()) FAIL(st.error().message());
      }
      next_step = std::max(next_step, e.step + 1);
    }
    auto latest = latest_complete(fs, dir.path(), Verify::kChecksum);
    if (latest.ok()) ++resumable;
  }
  WARN(kills << " kills: " << left_incomplete << " mid-save, resumable after " << resumable);
  CHECK(resumable > kills / 2);
  CHECK(left_incomplete > 0);
}
