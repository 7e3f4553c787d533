// Slow work off the loop thread: hang reports (gdb can take 10 s), checksum verification of
// resume candidates, commit read-backs and retention scans run on a worker, and their results
// come back to the loop, which must stay free to hear a notice within 100 ms.
//
// Thread-safety: submit() is called on the loop thread; `work` runs on a worker thread and
// `done` on the loop thread afterwards (never inline in submit()).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <utility>

namespace shardguard {

class Worker {
 public:
  virtual ~Worker() = default;
  virtual void submit(std::function<void()> work, std::function<void()> done) = 0;
};

// Runs `work` (returning T) on the worker and hands its result to `done` on the loop thread.
template <typename T>
void run_off_loop(Worker& worker, std::function<T()> work, std::function<void(T)> done) {
  auto result = std::make_shared<std::optional<T>>();
  worker.submit([result, work = std::move(work)] { result->emplace(work()); },
                [result, done = std::move(done)] { done(std::move(**result)); });
}

}  // namespace shardguard
