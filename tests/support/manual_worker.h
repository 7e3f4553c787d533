// A Worker (core/worker.h) that runs nothing until the test says so: the test decides when
// slow work "finishes", so it can check that the loop keeps serving meanwhile. Jobs run on the
// calling thread; their completions are posted to the loop, as the real worker does.
#pragma once

#include <deque>
#include <functional>
#include <utility>

#include "core/worker.h"
#include "io/event_loop.h"

namespace shardguard::testing {

class ManualWorker final : public Worker {
 public:
  explicit ManualWorker(io::EventLoop& loop) : loop_(loop) {}
  void submit(std::function<void()> work, std::function<void()> done) override {
    jobs_.emplace_back(std::move(work), std::move(done));
  }
  size_t pending() const { return jobs_.size(); }
  // Runs the oldest job now; its completion runs on the loop's next turn.
  void run_next() {
    auto job = std::move(jobs_.front());
    jobs_.pop_front();
    job.first();
    loop_.post(std::move(job.second));
  }
  void run_all() {
    while (!jobs_.empty()) run_next();
  }

 private:
  io::EventLoop& loop_;
  std::deque<std::pair<std::function<void()>, std::function<void()>>> jobs_;
};

}  // namespace shardguard::testing
