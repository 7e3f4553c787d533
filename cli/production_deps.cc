#include "cli/production_deps.h"

#include "io/event_loop.h"
#include "io/http_client.h"
#include "io/process.h"
#include "io/thread_worker.h"
#include "storage/location.h"

namespace shardguard::cli {

struct ProductionDeps::Impl {
  Impl(Filesystem& fs, storage::Store* checkpoints) : fs(fs) { deps.checkpoints = checkpoints; }
  Filesystem& fs;
  io::EventLoop loop;
  io::AsioTimerFactory timers{loop};
  io::PosixProcessLauncher launcher{loop};
  io::BeastHttpClient http{loop};
  SeededRandom random;
  io::ThreadWorker worker{loop, 2};
  io::Deps deps{loop, RealClock::instance(), timers, fs, launcher, http, random, worker};
};

ProductionDeps::ProductionDeps(Filesystem& fs, storage::Store* checkpoints)
    : impl_(std::make_unique<Impl>(fs, checkpoints)) {}
ProductionDeps::~ProductionDeps() = default;
const io::Deps& ProductionDeps::deps() const { return impl_->deps; }
io::EventLoop& ProductionDeps::loop() { return impl_->loop; }

std::unique_ptr<RootedFilesystem> job_filesystem(const std::string& run_dir,
                                                 const std::string& checkpoint_dir,
                                                 std::optional<uint32_t> group) {
  std::vector<RootOptions> roots(storage::is_bucket_url(checkpoint_dir) ? 1 : 2);
  roots[0].path = run_dir;
  if (roots.size() > 1) roots[1].path = checkpoint_dir;
  for (auto& r : roots) r.group = group;
  return std::make_unique<RootedFilesystem>(std::move(roots), &PosixFilesystem::instance());
}

}  // namespace shardguard::cli
