// The production Worker (core/worker.h): a few threads that run submitted work and post each
// completion back to the EventLoop. Work queued when the worker is destroyed is dropped; the
// work in progress is finished (and its completion dropped) before the destructor returns.
// Thread-safety: submit() from the loop thread; completions run on the loop thread.
#pragma once

#include <memory>

#include "core/worker.h"

namespace shardguard::io {

class EventLoop;

class ThreadWorker final : public Worker {
 public:
  explicit ThreadWorker(EventLoop& loop, int threads = 2);
  ~ThreadWorker() override;
  void submit(std::function<void()> work, std::function<void()> done) override;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace shardguard::io
