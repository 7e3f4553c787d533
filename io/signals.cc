#include "io/signals.h"

#include <signal.h>

#include <boost/asio/signal_set.hpp>

#include "io/detail/asio.h"
#include "io/event_loop.h"

namespace shardguard::io {

struct SignalWatcher::Impl : std::enable_shared_from_this<Impl> {
  explicit Impl(boost::asio::io_context& ctx) : set(ctx) {}
  boost::asio::signal_set set;
  std::map<int, Callback> callbacks;
  bool waiting = false;
  uint64_t generation = 0;  // bumped by cancel(): a queued delivery from before is dropped

  void wait() {
    if (waiting || callbacks.empty()) return;
    waiting = true;
    set.async_wait([self = shared_from_this(), generation = generation](
                       const boost::system::error_code& ec, int sig) {
      if (generation != self->generation) return;
      self->waiting = false;
      if (ec) return;
      auto it = self->callbacks.find(sig);
      if (it != self->callbacks.end()) {
        Callback cb = it->second;  // a copy: the callback may call watch() or cancel()
        cb(sig);
      }
      if (generation == self->generation) self->wait();
    });
  }
};

SignalWatcher::SignalWatcher(EventLoop& loop)
    : impl_(std::make_shared<Impl>(detail::asio_context(loop))) {}

SignalWatcher::~SignalWatcher() { cancel(); }

Status SignalWatcher::watch(int sig, Callback callback) {
  if (sig <= 0 || sig >= NSIG || sig == SIGKILL || sig == SIGSTOP) {
    return Error(ErrorCode::kInvalid, "watch signal " + std::to_string(sig) + ": cannot be caught");
  }
  boost::system::error_code ec;
  impl_->set.add(sig, ec);
  if (ec) {
    return Error(ErrorCode::kIo, "watch signal " + std::to_string(sig) + ": " + ec.message(),
                 ec.value());
  }
  impl_->callbacks[sig] = std::move(callback);
  impl_->wait();
  return ok_status();
}

void SignalWatcher::cancel() {
  ++impl_->generation;
  impl_->waiting = false;
  impl_->callbacks.clear();
  boost::system::error_code ignored;
  impl_->set.clear(ignored);  // restores the default dispositions
  impl_->set.cancel(ignored);
}

GracefulStop::GracefulStop(EventLoop& loop, std::function<void(int sig)> on_stop) : watcher_(loop) {
  auto handler = [this, triggered = triggered_, on_stop = std::move(on_stop)](int sig) {
    if (*triggered) return;
    *triggered = true;
    watcher_.cancel();
    on_stop(sig);
  };
  (void)watcher_.watch(SIGINT, handler);
  (void)watcher_.watch(SIGTERM, handler);
}

}  // namespace shardguard::io
