// Small statistics for the simulator's reports: means with 95% confidence intervals over
// seeds (Student's t), least-squares polynomials, and the optimum of a fitted goodput curve.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace shardguard::sim {

struct Estimate {
  double mean = 0;
  double half_width = 0;  // of the 95% confidence interval of the mean (0 for one sample)
  double stddev = 0;
  uint32_t n = 0;
};
Estimate estimate(const std::vector<double>& samples);

// The two-sided 95% quantile of Student's t with `df` degrees of freedom.
double t95(uint32_t df);

// Least-squares coefficients c[0] + c[1] x + ... + c[degree] x^degree; nullopt when the
// points cannot determine them (fewer than degree + 1 distinct x).
std::optional<std::vector<double>> polyfit(const std::vector<double>& x,
                                           const std::vector<double>& y, uint32_t degree);
double polyval(const std::vector<double>& c, double x);

// y against ln(x): a cubic from 6 points on, a quadratic below; valid over [lo, hi] of x.
struct LogCurve {
  std::vector<double> coef;  // in ln(x)
  double lo = 0, hi = 0;
  double at(double x) const;
};
// Fits the points (x ascending). `window` > 0 fits only that many consecutive points around
// the highest y (clamped to the ends): a local fit for a curve too skewed for one polynomial.
std::optional<LogCurve> fit_log_curve(const std::vector<double>& x, const std::vector<double>& y,
                                      size_t window = 0);

struct CurveOptimum {
  double x = 0;           // where the fitted curve peaks
  double y = 0;           // its value there
  bool interior = false;  // false: the peak is at an end of the fitted range
};
// The maximum of fit_log_curve over its range. The goodput curve of a checkpoint interval is
// close to symmetric in ln(x) near its optimum, so a low-order fit there is nearly unbiased.
std::optional<CurveOptimum> fitted_maximum(const std::vector<double>& x,
                                           const std::vector<double>& y, size_t window = 0);

}  // namespace shardguard::sim
