#include "io/event_loop.h"

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "io/detail/asio.h"

namespace shardguard::io {

struct EventLoop::Impl {
  boost::asio::io_context ctx{1};
  // Set by stop(), consumed by the run call it stopped (or the next one).
  std::atomic<bool> stop_pending{false};

  // Returns false when a pending stop() means the run call must return at once.
  bool prepare() {
    if (!ctx.stopped()) return true;
    if (stop_pending.exchange(false)) return false;
    ctx.restart();  // the previous run ran out of work: allow running again
    return true;
  }
  void finish() {
    if (ctx.stopped()) stop_pending.store(false);
  }
};

boost::asio::io_context& detail::EventLoopAccess::context(EventLoop& loop) {
  return loop.impl_->ctx;
}

EventLoop::EventLoop() : impl_(std::make_unique<Impl>()) {}
EventLoop::~EventLoop() = default;

size_t EventLoop::run() {
  if (!impl_->prepare()) return 0;
  size_t n = impl_->ctx.run();
  impl_->finish();
  return n;
}

size_t EventLoop::run_for(Duration d) {
  if (!impl_->prepare()) return 0;
  size_t n = impl_->ctx.run_for(d);
  impl_->finish();
  return n;
}

size_t EventLoop::run_one_for(Duration d) {
  if (!impl_->prepare()) return 0;
  size_t n = impl_->ctx.run_one_for(d);
  impl_->finish();
  return n;
}

size_t EventLoop::poll() {
  if (!impl_->prepare()) return 0;
  size_t n = impl_->ctx.poll();
  impl_->finish();
  return n;
}

void EventLoop::stop() {
  impl_->stop_pending.store(true);
  impl_->ctx.stop();
}

bool EventLoop::stopped() const { return impl_->stop_pending.load(); }

void EventLoop::post(std::function<void()> fn) { boost::asio::post(impl_->ctx, std::move(fn)); }

bool EventLoop::run_until(const std::function<bool()>& done, Duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // The guard keeps run_one_for() waiting for handlers instead of returning when idle.
  auto guard = boost::asio::make_work_guard(impl_->ctx);
  while (!done()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    if (!impl_->prepare()) break;
    impl_->ctx.run_one_for(deadline - now);
    if (impl_->ctx.stopped() && impl_->stop_pending.exchange(false)) break;
  }
  return done();
}

namespace {

// Shared with the pending wait handler, so destroying the Timer while a handler is queued
// is safe: the handler sees a newer generation and does nothing.
struct TimerState {
  explicit TimerState(boost::asio::io_context& ctx) : timer(ctx) {}
  boost::asio::steady_timer timer;
  uint64_t generation = 0;
  bool armed = false;
};

class AsioTimer final : public Timer {
 public:
  explicit AsioTimer(boost::asio::io_context& ctx) : state_(std::make_shared<TimerState>(ctx)) {}
  ~AsioTimer() override { cancel(); }

  void arm(Duration after, std::function<void()> callback) override {
    cancel();
    TimerState& s = *state_;
    s.armed = true;
    const uint64_t generation = s.generation;
    s.timer.expires_after(after);
    s.timer.async_wait([state = state_, generation,
                        cb = std::move(callback)](const boost::system::error_code&) mutable {
      // A cancel() or re-arm after the deadline passed can leave a "success" handler
      // queued; the generation tells it apart.
      if (state->generation != generation || !state->armed) return;
      state->armed = false;
      ++state->generation;
      cb();
    });
  }

  void cancel() override {
    TimerState& s = *state_;
    ++s.generation;
    if (s.armed) s.timer.cancel();
    s.armed = false;
  }

  bool armed() const override { return state_->armed; }

 private:
  std::shared_ptr<TimerState> state_;
};

}  // namespace

std::unique_ptr<Timer> AsioTimerFactory::make_timer() {
  return std::make_unique<AsioTimer>(detail::asio_context(loop_));
}

}  // namespace shardguard::io
