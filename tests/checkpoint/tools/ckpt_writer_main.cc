// A checkpointing loop to be killed: saves and commits step after step (world ranks as
// threads, each writing its shard concurrently) until killed, keeping the last 3.
// Usage: sg_test_ckpt_writer DIR WORLD FIRST_STEP
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/retention.h"
#include "tests/checkpoint/step_fixture.h"

using namespace shardguard;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s DIR WORLD FIRST_STEP\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const uint32_t world = static_cast<uint32_t>(std::atoi(argv[2]));
  uint64_t step = std::strtoull(argv[3], nullptr, 10);
  auto& fs = PosixFilesystem::instance();
  const testing::StepShape shape{64, 4096};  // 1 MiB of weights per step
  for (;; ++step) {
    std::vector<std::thread> ranks;
    std::vector<Status> results(world);
    for (uint32_t r = 0; r < world; ++r)
      ranks.emplace_back([&, r] {
        results[r] = testing::write_rank_of_step(fs, dir, step, r, world, shape);
      });
    for (auto& t : ranks) t.join();
    for (const auto& st : results)
      if (!st.ok()) {
        std::fprintf(stderr, "save failed: %s\n", st.error().message().c_str());
        return 1;
      }
    checkpoint::CommitOptions c;
    c.checkpoint_dir = dir;
    c.job_id = "crash-job";
    c.step = step;
    c.world_size = world;
    auto m = checkpoint::commit_checkpoint(fs, RealClock::instance(), c);
    if (!m.ok()) {
      std::fprintf(stderr, "commit failed: %s\n", m.error().message().c_str());
      return 1;
    }
    auto entries = checkpoint::list_checkpoints(fs, dir, checkpoint::Verify::kSize);
    if (entries.ok())
      (void)checkpoint::apply_retention(fs, checkpoint::plan_retention(*entries, {3, 0, {}}));
  }
}
