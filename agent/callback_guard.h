// CallbackGuard: makes completion callbacks (HTTP answers, timers) that outlive a stop() or
// the object itself harmless. wrap() returns a callable that does nothing once the guard was
// invalidated or destroyed; the HTTP client always calls back, so this is how a source
// forgets requests still in flight.
//
// Thread-safety: none; use on the loop thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

namespace shardguard::agent {

class CallbackGuard {
 public:
  // A callable forwarding to `fn` while this guard lives and invalidate() was not called
  // since. `fn` must return void.
  template <typename F>
  auto wrap(F fn) const {
    return [weak = std::weak_ptr<uint64_t>(generation_), gen = *generation_,
            fn = std::move(fn)](auto&&... args) mutable {
      auto alive = weak.lock();
      if (!alive || *alive != gen) return;
      fn(std::forward<decltype(args)>(args)...);
    };
  }
  // Disarms every callable wrapped so far.
  void invalidate() { ++*generation_; }

 private:
  std::shared_ptr<uint64_t> generation_ = std::make_shared<uint64_t>(0);
};

}  // namespace shardguard::agent
