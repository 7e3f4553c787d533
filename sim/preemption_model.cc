#include "sim/preemption_model.h"

#include <cmath>
#include <limits>

namespace shardguard::sim {

std::string_view cloud_name(Cloud cloud) {
  switch (cloud) {
    case Cloud::kNone:
      return "none";
    case Cloud::kAws:
      return "aws";
    case Cloud::kGcp:
      return "gcp";
    case Cloud::kAzure:
      return "azure";
  }
  return "unknown";
}

double default_notice_seconds(Cloud cloud) {
  switch (cloud) {
    case Cloud::kAws:
      return 120;  // EC2 Spot instance interruption notice
    case Cloud::kGcp:
      return 30;  // preemption notice (ACPI G2 soft off)
    case Cloud::kAzure:
      return 30;  // Scheduled Events "Preempt", NotBefore >= 30 s
    case Cloud::kNone:
      return 0;
  }
  return 0;
}

Result<double> aws_bucket_probability(std::string_view bucket) {
  struct Row {
    std::string_view name;
    double p;
  };
  static constexpr Row kRows[] = {
      {"<5%", 0.025}, {"5-10%", 0.075}, {"10-15%", 0.125}, {"15-20%", 0.175}, {">20%", 0.25}};
  for (const Row& r : kRows)
    if (r.name == bucket) return r.p;
  return Error(ErrorCode::kInvalid, "unknown AWS advisor bucket '" + std::string(bucket) +
                                        "': expected one of \"<5%\", \"5-10%\", \"10-15%\", "
                                        "\"15-20%\", \">20%\"");
}

double hazard_from_probability(double p, double period_seconds) {
  if (p <= 0 || period_seconds <= 0) return 0;
  if (p >= 1) return std::numeric_limits<double>::infinity();
  return -std::log1p(-p) / period_seconds;
}

double Bathtub::cdf(double t) const {
  if (t <= 0) return 0;
  if (t >= b) return 1;
  const double f = a * (1 - std::exp(-t / tau1) + std::exp((t - b) / tau2));
  return std::min(f, 1.0);
}

double Bathtub::inverse(double u) const {
  if (u >= cdf(b * (1 - 1e-12))) return b;
  double lo = 0, hi = b;
  for (int i = 0; i < 64; ++i) {  // F is increasing on [0, b): bisection to full precision
    const double mid = 0.5 * (lo + hi);
    (cdf(mid) < u ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double sample_lifetime(const PreemptionModel& model, double u) {
  if (model.bathtub) return model.bathtub->inverse(u);
  if (model.hazard <= 0) return std::numeric_limits<double>::infinity();
  return -std::log(u) / model.hazard;
}

}  // namespace shardguard::sim
