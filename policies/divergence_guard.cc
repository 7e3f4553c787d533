#include "policies/divergence_guard.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace shardguard::policies {
namespace {

double median_of(const std::deque<double>& samples) {
  std::vector<double> v(samples.begin(), samples.end());
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  if (v.size() % 2 == 1) return v[mid];
  const double upper = v[mid];
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

// The step whose checkpoint holds the state a value reported at `step` was computed on.
uint64_t state_before(uint64_t step) { return step > 0 ? step - 1 : 0; }

// About six significant digits, never in exponent form (people read these).
std::string number(double v) {
  if (!std::isfinite(v)) return "?";
  const double a = std::fabs(v);
  const int magnitude = a > 0 ? static_cast<int>(std::floor(std::log10(a))) : 0;
  const int decimals = std::clamp(5 - magnitude, 0, 12);
  char buf[400];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

}  // namespace

bool known_scalar(std::string_view name) { return name == "loss" || name == "grad_norm"; }

std::string Anomaly::describe(double spike_factor) const {
  const std::string who = "rank " + std::to_string(rank) + ": " + scalar;
  const std::string range = first_step == seen_step
                                ? "step " + std::to_string(first_step)
                                : "steps " + std::to_string(first_step) + "-" + std::to_string(seen_step);
  if (rule == "nonfinite") return who + " NaN or Inf (" + range + ")";
  return who + " " + number(value) + " > " + number(spike_factor) + " x median " + number(median) +
         " (" + range + ")";
}

DivergenceGuard::DivergenceGuard(GuardOptions options) : options_(std::move(options)) {}

void DivergenceGuard::reset() { series_.clear(); }

std::optional<Anomaly> DivergenceGuard::observe(uint32_t rank, const StepScalars& scalars) {
  if (!options_.enabled) return std::nullopt;
  for (auto [name, window] : {std::pair{"loss", &scalars.loss}, std::pair{"grad_norm", &scalars.grad_norm}}) {
    if (!*window || (*window)->empty()) continue;
    if (auto a = check(rank, name, **window)) return a;
  }
  return std::nullopt;
}

std::optional<Anomaly> DivergenceGuard::check(uint32_t rank, const std::string& name,
                                              const ScalarWindow& w) {
  if (w.nonfinite_step && options_.nonfinite.contains(name))
    return Anomaly{rank, name, "nonfinite", w.first_step, w.last_step, state_before(*w.nonfinite_step)};
  if (w.count == 0 || options_.spike_factor <= 1 || !options_.spike_scalars.contains(name))
    return std::nullopt;
  Series& s = series_[{rank, name}];
  const bool ready = s.samples.size() >= std::max<uint32_t>(1, options_.min_samples);
  const double median = ready ? median_of(s.samples) : 0;
  // A median at or below zero has no meaningful multiple (a loss is usually positive).
  if (ready && median > 0 && w.max > options_.spike_factor * median) {
    if (!s.spike_from) {
      s.spike_from = w.first_step;
      s.spike_peak = w.max;
      s.spike_median = median;
    }
    s.spike_peak = std::max(s.spike_peak, w.max);
    // The values of a spike stay out of the median it is measured against.
    if (w.last_step + 1 - *s.spike_from >= std::max<uint64_t>(1, options_.spike_steps))
      return Anomaly{rank,        name,         "spike",
                     *s.spike_from, w.last_step, state_before(*s.spike_from),
                     s.spike_peak, s.spike_median};
    return std::nullopt;
  }
  s.spike_from.reset();
  s.samples.push_back(w.last);
  while (s.samples.size() > std::max<uint32_t>(1, options_.median_window)) s.samples.pop_front();
  return std::nullopt;
}

}  // namespace shardguard::policies
