#include "io/thread_worker.h"

#include <spdlog/spdlog.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "io/event_loop.h"

namespace shardguard::io {

struct ThreadWorker::Impl {
  EventLoop& loop;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<std::function<void()>, std::function<void()>>> queue;
  bool closing = false;
  std::vector<std::thread> threads;

  explicit Impl(EventLoop& l) : loop(l) {}

  void run(const std::shared_ptr<Impl>& self) {
    for (;;) {
      std::pair<std::function<void()>, std::function<void()>> job;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return closing || !queue.empty(); });
        if (closing) return;
        job = std::move(queue.front());
        queue.pop_front();
      }
      try {
        job.first();
      } catch (const std::exception& e) {
        spdlog::error("worker: {}", e.what());
      }
      // The completion runs only while the worker lives: its captures may point into it.
      std::weak_ptr<Impl> weak = self;
      loop.post([weak, done = std::move(job.second)] {
        if (auto alive = weak.lock(); alive && !alive->is_closing()) done();
      });
    }
  }

  bool is_closing() {
    std::lock_guard lock(mu);
    return closing;
  }
};

ThreadWorker::ThreadWorker(EventLoop& loop, int threads) : impl_(std::make_shared<Impl>(loop)) {
  for (int i = 0; i < std::max(1, threads); ++i)
    impl_->threads.emplace_back([p = impl_.get(), self = impl_] { p->run(self); });
}

ThreadWorker::~ThreadWorker() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->closing = true;
    impl_->queue.clear();
  }
  impl_->cv.notify_all();
  for (auto& t : impl_->threads) t.join();
}

void ThreadWorker::submit(std::function<void()> work, std::function<void()> done) {
  {
    std::lock_guard lock(impl_->mu);
    impl_->queue.emplace_back(std::move(work), std::move(done));
  }
  impl_->cv.notify_one();
}

}  // namespace shardguard::io
