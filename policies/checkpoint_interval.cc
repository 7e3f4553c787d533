#include "policies/checkpoint_interval.h"

#include <algorithm>
#include <cmath>

namespace shardguard::policies {

Duration young_daly_interval(Duration checkpoint_cost, Duration mtbf, Duration min_interval,
                             Duration max_interval) {
  if (checkpoint_cost <= Duration::zero() || mtbf <= Duration::zero()) return min_interval;
  const double cost_s = std::chrono::duration<double>(checkpoint_cost).count();
  const double mtbf_s = std::chrono::duration<double>(mtbf).count();
  const double optimum_s = std::sqrt(2.0 * cost_s * mtbf_s);
  const double hi_s = std::chrono::duration<double>(max_interval).count();
  if (optimum_s >= hi_s) return std::max(max_interval, min_interval);
  const auto optimum =
      std::chrono::duration_cast<Duration>(std::chrono::duration<double>(optimum_s));
  return std::max(std::min(optimum, max_interval), min_interval);
}

void FailureRateEstimator::record_failure(SteadyTime t) {
  if (!first_failure_ || t < *first_failure_) first_failure_ = t;
  ++failures_;
}

Duration FailureRateEstimator::mtbf(SteadyTime now, Duration configured) const {
  if (failures_ < 2) return configured;
  // Without a start, the first failure opens the observation: count the failures after it.
  const SteadyTime from = start_ ? *start_ : *first_failure_;
  const size_t counted = start_ ? failures_ : failures_ - 1;
  const Duration observed = (now - from) / static_cast<int64_t>(counted);
  return observed > Duration::zero() ? observed : configured;
}

void CheckpointCostEstimator::record(Duration begin_to_commit) {
  recent_.push_back(begin_to_commit);
  if (recent_.size() > kSamples) recent_.pop_front();
}

Duration CheckpointCostEstimator::estimate(Duration fallback) const {
  if (recent_.empty()) return fallback;
  std::vector<Duration> sorted(recent_.begin(), recent_.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t mid = sorted.size() / 2;
  if (sorted.size() % 2 == 1) return sorted[mid];
  return sorted[mid - 1] + (sorted[mid] - sorted[mid - 1]) / 2;
}

}  // namespace shardguard::policies
