// Exponential backoff with jitter from an injected random source (envoy's backoff_strategy):
// the delay before the n-th relaunch is initial * multiplier^n, capped at max, then scaled by
// a factor drawn from [1 - jitter, 1 + jitter]. The restart flow resets it after a healthy run.
//
// Thread-safety: none; one object belongs to one supervisor. The random source is called
// from next() only.
#pragma once

#include <cstdint>
#include <functional>

#include "core/clock.h"

namespace shardguard::policies {

struct BackoffOptions {
  Duration initial;
  Duration max;
  double multiplier = 2.0;
  double jitter = 0.2;  // +-20%
};

class ExponentialBackoff {
 public:
  // `uniform01` returns doubles in [0, 1] (values outside are clamped); an empty function
  // means no jitter.
  ExponentialBackoff(BackoffOptions options, std::function<double()> uniform01);

  // The delay before the next attempt: initial * multiplier^attempts() capped at max, times
  // (1 + jitter * (2u - 1)). Counts one attempt. Never negative.
  Duration next();
  // Starts the growth over from `initial`.
  void reset() { attempts_ = 0; }
  // Calls to next() since construction or the last reset().
  uint32_t attempts() const { return attempts_; }

 private:
  BackoffOptions options_;
  std::function<double()> uniform01_;
  uint32_t attempts_ = 0;
};

}  // namespace shardguard::policies
