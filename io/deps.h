// The one bundle of side effects that components are built with (STYLE.md: inject, don't reach
// out): the loop and its timers, the clock, the filesystem, process launching, HTTP, randomness,
// the worker for slow work and where checkpoints live. Only `main` (cli/) builds the real ones;
// tests build fakes. Plain references: the owner of the bundle outlives every component built
// from it.
#pragma once

#include "core/clock.h"
#include "core/filesystem.h"
#include "core/random.h"
#include "core/worker.h"

namespace shardguard::storage {
class Store;
}

namespace shardguard::io {

class EventLoop;
class ProcessLauncher;
class HttpClient;

struct Deps {
  EventLoop& loop;
  Clock& clock;
  TimerFactory& timers;
  Filesystem& fs;
  ProcessLauncher& launcher;
  HttpClient& http;
  Random& random;
  Worker& worker;
  // The job's checkpoint location (a bucket's Store, or a directory's over `fs`). Null: the
  // job's checkpoint_dir is a directory read through `fs` (storage::StoreRef).
  storage::Store* checkpoints = nullptr;
};

}  // namespace shardguard::io
