#include "cli/production_deps.h"

#include "io/event_loop.h"
#include "io/http_client.h"
#include "io/process.h"
#include "io/thread_worker.h"

namespace shardguard::cli {

struct ProductionDeps::Impl {
  io::EventLoop loop;
  io::AsioTimerFactory timers{loop};
  io::PosixProcessLauncher launcher{loop};
  io::BeastHttpClient http{loop};
  SeededRandom random;
  io::ThreadWorker worker{loop, 2};
  io::Deps deps{loop,          RealClock::instance(), timers, PosixFilesystem::instance(),
                launcher,      http,                  random, worker};
};

ProductionDeps::ProductionDeps() : impl_(std::make_unique<Impl>()) {}
ProductionDeps::~ProductionDeps() = default;
const io::Deps& ProductionDeps::deps() const { return impl_->deps; }
io::EventLoop& ProductionDeps::loop() { return impl_->loop; }

}  // namespace shardguard::cli
