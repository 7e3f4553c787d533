// Signals as events on the EventLoop: the handler Asio installs only records the signal,
// and the callbacks below run later on the loop thread, where they may do anything.
//
// Thread-safety: construct, watch() and cancel() on the loop thread (or before it runs);
// callbacks run on the loop thread.
#pragma once

#include <functional>
#include <map>
#include <memory>

#include "core/result.h"

namespace shardguard::io {

class EventLoop;

// Calls a callback each time a watched signal arrives. While anything is watched a wait
// is pending, so EventLoop::run() does not return by itself: cancel() (or destroying the
// watcher) ends it and restores the default dispositions.
class SignalWatcher {
 public:
  using Callback = std::function<void(int sig)>;
  explicit SignalWatcher(EventLoop& loop);
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Starts delivering `sig` to `callback` (replacing an earlier callback for it).
  // kInvalid for a signal that cannot be caught (SIGKILL, SIGSTOP, out of range).
  Status watch(int sig, Callback callback);
  // Stops watching every signal; pending deliveries are dropped.
  void cancel();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// Graceful stop, as in the Asio HTTP server's do_await_stop: the first SIGINT or SIGTERM
// calls `on_stop(sig)` once, then stops watching, so the default action is back and a
// second signal ends the process the usual way. on_stop should cancel outstanding work so
// that EventLoop::run() returns by itself.
class GracefulStop {
 public:
  GracefulStop(EventLoop& loop, std::function<void(int sig)> on_stop);
  // True once a stop signal has arrived.
  bool triggered() const { return *triggered_; }
  // Stops watching without calling on_stop.
  void cancel() { watcher_.cancel(); }

 private:
  SignalWatcher watcher_;
  std::shared_ptr<bool> triggered_ = std::make_shared<bool>(false);
};

}  // namespace shardguard::io
