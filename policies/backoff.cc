#include "policies/backoff.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace shardguard::policies {

ExponentialBackoff::ExponentialBackoff(BackoffOptions options, std::function<double()> uniform01)
    : options_(options), uniform01_(std::move(uniform01)) {}

Duration ExponentialBackoff::next() {
  const double initial = static_cast<double>(std::max<int64_t>(options_.initial.count(), 0));
  const double max = static_cast<double>(std::max<int64_t>(options_.max.count(), 0));
  // pow() may reach infinity after many attempts; min() with max keeps it finite.
  const double grown = initial * std::pow(std::max(options_.multiplier, 1.0), attempts_);
  const double base = std::min(grown, max);
  const double u = uniform01_ ? std::clamp(uniform01_(), 0.0, 1.0) : 0.5;
  const double jitter = std::clamp(options_.jitter, 0.0, 1.0);
  const double delay = base * (1.0 + jitter * (2.0 * u - 1.0));
  if (attempts_ < UINT32_MAX) ++attempts_;
  constexpr double kLongest = 9.2e18;  // just under INT64_MAX nanoseconds
  return Duration(std::llround(std::clamp(delay, 0.0, kLongest)));
}

}  // namespace shardguard::policies
