#include "sim/stats.h"

#include <algorithm>
#include <cmath>

namespace shardguard::sim {

double t95(uint32_t df) {
  static constexpr double kTable[] = {0,     12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365,
                                      2.306, 2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
                                      2.120, 2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069,
                                      2.064, 2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  if (df == 0) return 0;
  if (df <= 30) return kTable[df];
  if (df <= 60) return 2.042 - (2.042 - 2.000) * (df - 30) / 30.0;
  if (df <= 120) return 2.000 - (2.000 - 1.980) * (df - 60) / 60.0;
  return 1.960;
}

Estimate estimate(const std::vector<double>& s) {
  Estimate e;
  e.n = static_cast<uint32_t>(s.size());
  if (s.empty()) return e;
  double sum = 0;
  for (double v : s) sum += v;
  e.mean = sum / double(s.size());
  if (s.size() < 2) return e;
  double ss = 0;
  for (double v : s) ss += (v - e.mean) * (v - e.mean);
  e.stddev = std::sqrt(ss / double(s.size() - 1));
  e.half_width = t95(e.n - 1) * e.stddev / std::sqrt(double(e.n));
  return e;
}

std::optional<std::vector<double>> polyfit(const std::vector<double>& x,
                                           const std::vector<double>& y, uint32_t degree) {
  const size_t m = degree + 1;
  if (x.size() != y.size() || x.size() < m) return std::nullopt;
  // Normal equations on x centred and scaled to [-1, 1], for conditioning; solved by
  // Gaussian elimination with partial pivoting, then mapped back.
  const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
  const double mid = 0.5 * (*lo + *hi), half = 0.5 * (*hi - *lo);
  if (!(half > 0)) return std::nullopt;
  std::vector<std::vector<double>> a(m, std::vector<double>(m + 1, 0));
  for (size_t k = 0; k < x.size(); ++k) {
    const double u = (x[k] - mid) / half;
    std::vector<double> pw(2 * m, 1);
    for (size_t i = 1; i < pw.size(); ++i) pw[i] = pw[i - 1] * u;
    for (size_t i = 0; i < m; ++i) {
      for (size_t j = 0; j < m; ++j) a[i][j] += pw[i + j];
      a[i][m] += pw[i] * y[k];
    }
  }
  for (size_t col = 0; col < m; ++col) {
    size_t piv = col;
    for (size_t r = col + 1; r < m; ++r)
      if (std::fabs(a[r][col]) > std::fabs(a[piv][col])) piv = r;
    if (std::fabs(a[piv][col]) < 1e-300) return std::nullopt;
    std::swap(a[col], a[piv]);
    for (size_t r = 0; r < m; ++r) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      for (size_t k = col; k <= m; ++k) a[r][k] -= f * a[col][k];
    }
  }
  std::vector<double> cu(m);  // coefficients in u
  for (size_t i = 0; i < m; ++i) cu[i] = a[i][m] / a[i][i];
  // Expand sum cu[i] ((x - mid) / half)^i into powers of x.
  std::vector<double> c(m, 0);
  std::vector<double> term = {1};  // ((x - mid)/half)^i as a polynomial in x
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < term.size(); ++j) c[j] += cu[i] * term[j];
    std::vector<double> next(term.size() + 1, 0);
    for (size_t j = 0; j < term.size(); ++j) {
      next[j + 1] += term[j] / half;
      next[j] -= term[j] * mid / half;
    }
    term = std::move(next);
  }
  return c;
}

double polyval(const std::vector<double>& c, double x) {
  double y = 0;
  for (size_t i = c.size(); i-- > 0;) y = y * x + c[i];
  return y;
}

double LogCurve::at(double x) const { return polyval(coef, std::log(x)); }

std::optional<LogCurve> fit_log_curve(const std::vector<double>& x, const std::vector<double>& y,
                                      size_t window) {
  if (x.size() < 3 || x.size() != y.size()) return std::nullopt;
  size_t first = 0, count = x.size();
  if (window >= 3 && window < x.size()) {
    const size_t best = size_t(std::max_element(y.begin(), y.end()) - y.begin());
    first = best > window / 2 ? std::min(best - window / 2, x.size() - window) : 0;
    count = window;
  }
  std::vector<double> lx, ly;
  for (size_t i = first; i < first + count; ++i) {
    if (!(x[i] > 0)) return std::nullopt;
    lx.push_back(std::log(x[i]));
    ly.push_back(y[i]);
  }
  auto c = polyfit(lx, ly, count >= 6 ? 3 : 2);
  if (!c) return std::nullopt;
  const auto [lo, hi] = std::minmax_element(lx.begin(), lx.end());
  return LogCurve{std::move(*c), std::exp(*lo), std::exp(*hi)};
}

std::optional<CurveOptimum> fitted_maximum(const std::vector<double>& x,
                                           const std::vector<double>& y, size_t window) {
  const auto fit = fit_log_curve(x, y, window);
  if (!fit) return std::nullopt;
  const double a = std::log(fit->lo), b = std::log(fit->hi);
  CurveOptimum best{0, -1e300, false};
  constexpr int kSteps = 20000;
  int best_k = 0;
  for (int k = 0; k <= kSteps; ++k) {
    const double u = a + (b - a) * k / kSteps;
    const double v = polyval(fit->coef, u);
    if (v > best.y) {
      best = {std::exp(u), v, false};
      best_k = k;
    }
  }
  best.interior = best_k > 0 && best_k < kSteps;
  return best;
}

}  // namespace shardguard::sim
