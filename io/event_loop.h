// EventLoop: the one place asynchronous work runs. It wraps a boost::asio::io_context behind
// a pimpl so that modules outside io/ never include Asio; io/*.cc reach the io_context
// through io/detail/asio.h. AsioTimerFactory implements core's TimerFactory on the loop.
//
// Thread-safety: post() and stop() may be called from any thread. run(), run_for(), poll()
// and run_one_for() are meant for one thread at a time (the loop thread); every handler,
// timer callback and completion callback of io/ runs on that thread. Objects built on a
// loop (timers, HTTP requests, servers, child processes) must be destroyed before it.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "core/clock.h"

namespace shardguard::io {

namespace detail {
struct EventLoopAccess;
}

class EventLoop {
 public:
  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Runs handlers until no work is left or stop() is called. Returns the number run.
  // A loop that ran out of work can be run again; a stop() issued while nothing runs
  // makes the next run call return at once (and is then consumed).
  size_t run();
  // Like run(), but returns after `d` at the latest.
  size_t run_for(Duration d);
  // Runs at most one handler, waiting up to `d` for one to be ready.
  size_t run_one_for(Duration d);
  // Runs the handlers that are ready now, without waiting.
  size_t poll();
  // Makes run()/run_for() return as soon as possible.
  void stop();
  // True after stop() until the next run call consumes it.
  bool stopped() const;
  // Queues `fn` to run on the loop thread; never runs it inline.
  void post(std::function<void()> fn);

  // Runs the loop until `done()` is true or `timeout` passes; returns done(). For tests and
  // blocking adapters (done() is checked between handlers, on the calling thread).
  bool run_until(const std::function<bool()>& done, Duration timeout);

 private:
  friend struct detail::EventLoopAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Timers on a real EventLoop (steady clock). Callbacks run on the loop thread. A timer
// must be armed, cancelled and destroyed on the loop thread (or while the loop is not
// running); destroying it cancels it and its callback never runs.
class AsioTimerFactory final : public TimerFactory {
 public:
  explicit AsioTimerFactory(EventLoop& loop) : loop_(loop) {}
  std::unique_ptr<Timer> make_timer() override;

 private:
  EventLoop& loop_;
};

}  // namespace shardguard::io
