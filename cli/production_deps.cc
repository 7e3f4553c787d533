#include "cli/production_deps.h"

#include "io/event_loop.h"
#include "io/http_client.h"
#include "io/process.h"
#include "io/thread_worker.h"

namespace shardguard::cli {

struct ProductionDeps::Impl {
  explicit Impl(Filesystem& fs) : fs(fs) {}
  Filesystem& fs;
  io::EventLoop loop;
  io::AsioTimerFactory timers{loop};
  io::PosixProcessLauncher launcher{loop};
  io::BeastHttpClient http{loop};
  SeededRandom random;
  io::ThreadWorker worker{loop, 2};
  io::Deps deps{loop, RealClock::instance(), timers, fs, launcher, http, random, worker};
};

ProductionDeps::ProductionDeps(Filesystem& fs) : impl_(std::make_unique<Impl>(fs)) {}
ProductionDeps::~ProductionDeps() = default;
const io::Deps& ProductionDeps::deps() const { return impl_->deps; }
io::EventLoop& ProductionDeps::loop() { return impl_->loop; }

}  // namespace shardguard::cli
