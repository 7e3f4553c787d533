// The two plots of `shardguard simulate`, written as SVG text (no plotting library): axes
// with ticks, points with 95% CI bars, the fitted curve, and marks for the Young/Daly interval
// and the fitted optimum; and stacked badput bars with a legend.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "sim/report.h"

namespace shardguard::sim {
namespace {

constexpr double kW = 720, kH = 440, kLeft = 70, kRight = 30, kTop = 40, kBottom = 60;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

std::string text(double x, double y, const std::string& s, const char* anchor = "middle",
                 int size = 12) {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + std::to_string(size) +
         "\" text-anchor=\"" + anchor + "\">" + escape(s) + "</text>\n";
}

std::string line(double x1, double y1, double x2, double y2, const std::string& style) {
  return "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" +
         num(y2) + "\" " + style + "/>\n";
}

std::string header(const std::string& title) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kW) + "\" height=\"" + num(kH) +
         "\" viewBox=\"0 0 " + num(kW) + " " + num(kH) +
         "\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n" +
         text(kW / 2, 22, title, "middle", 15);
}

// "Nice" tick values covering [lo, hi].
std::vector<double> ticks(double lo, double hi, int target = 6) {
  const double span = hi - lo;
  if (!(span > 0)) return {lo};
  const double raw = span / target, mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  std::vector<double> out;
  for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9 * span; v += step) out.push_back(v);
  return out;
}

}  // namespace

std::string goodput_vs_interval_svg(const SimulationReport& r) {
  if (!r.sweep || r.sweep->points.empty()) return "";
  const SweepSummary& s = *r.sweep;
  // x: log10 of the interval in minutes; y: goodput in percent.
  double xlo = 1e300, xhi = -1e300, ylo = 1e300, yhi = -1e300;
  for (const SweepPoint& p : s.points) {
    xlo = std::min(xlo, p.interval);
    xhi = std::max(xhi, p.interval);
    ylo = std::min(ylo, 100 * (p.goodput.mean - p.goodput.half_width));
    yhi = std::max(yhi, 100 * (p.goodput.mean + p.goodput.half_width));
  }
  xlo = std::min(xlo, s.young_daly);
  xhi = std::max(xhi, s.young_daly);
  const double lx0 = std::log10(xlo / 60) - 0.05, lx1 = std::log10(xhi / 60) + 0.05;
  const double pad = std::max(0.05, 0.08 * (yhi - ylo));
  ylo -= pad;
  yhi += pad;
  auto X = [&](double seconds) {
    return kLeft + (std::log10(seconds / 60) - lx0) / (lx1 - lx0) * (kW - kLeft - kRight);
  };
  auto Y = [&](double percent) {
    return kH - kBottom - (percent - ylo) / (yhi - ylo) * (kH - kTop - kBottom);
  };
  std::string svg = header("Goodput against the checkpoint interval (" + s.base + ")");
  const std::string axis = "stroke=\"black\" stroke-width=\"1\"";
  const std::string grid = "stroke=\"#dddddd\" stroke-width=\"1\"";
  svg += line(kLeft, kH - kBottom, kW - kRight, kH - kBottom, axis);
  svg += line(kLeft, kTop, kLeft, kH - kBottom, axis);
  for (double v : ticks(ylo, yhi)) {
    svg += line(kLeft, Y(v), kW - kRight, Y(v), grid);
    svg += text(kLeft - 6, Y(v) + 4, num(v), "end", 11);
  }
  for (double decade = std::floor(lx0); decade <= lx1; ++decade)
    for (double m : {1.0, 2.0, 5.0}) {
      const double minutes = m * std::pow(10, decade);
      const double lx = std::log10(minutes);
      if (lx < lx0 || lx > lx1) continue;
      const double x = X(minutes * 60);
      svg += line(x, kTop, x, kH - kBottom, grid);
      char label[32];
      std::snprintf(label, sizeof label, minutes < 1 ? "%.1f" : "%.0f", minutes);
      svg += text(x, kH - kBottom + 16, label, "middle", 11);
    }
  svg += text((kLeft + kW - kRight) / 2, kH - 18, "checkpoint interval (minutes, log scale)");
  svg += "<text x=\"18\" y=\"" + num((kTop + kH - kBottom) / 2) +
         "\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 18 " +
         num((kTop + kH - kBottom) / 2) + ")\">goodput (%)</text>\n";
  // The fitted curve, as the optimum was found: around the best points.
  std::vector<double> xs, ys;
  for (const SweepPoint& p : s.points) {
    xs.push_back(p.interval);
    ys.push_back(p.goodput.mean);
  }
  if (const auto fit = fit_log_curve(xs, ys, kSweepFitWindow)) {
    std::string pts;
    const double a = std::log(fit->lo), b = std::log(fit->hi);
    for (int k = 0; k <= 100; ++k) {
      const double x = std::exp(a + (b - a) * k / 100);
      pts += num(X(x)) + "," + num(Y(100 * fit->at(x))) + " ";
    }
    svg += "<polyline points=\"" + pts +
           "\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\"/>\n";
  }
  for (const SweepPoint& p : s.points) {
    const double x = X(p.interval);
    svg += line(x, Y(100 * (p.goodput.mean - p.goodput.half_width)), x,
                Y(100 * (p.goodput.mean + p.goodput.half_width)), "stroke=\"#333333\"");
    svg += "<circle cx=\"" + num(x) + "\" cy=\"" + num(Y(100 * p.goodput.mean)) +
           "\" r=\"3.5\" fill=\"#1f77b4\"/>\n";
  }
  const double yd = X(s.young_daly);
  svg += line(yd, kTop, yd, kH - kBottom, "stroke=\"#d62728\" stroke-dasharray=\"5,4\"");
  svg += text(yd + 4, kTop + 14, "Young/Daly " + seconds_text(s.young_daly), "start", 11);
  if (s.optimum) {
    svg += "<circle cx=\"" + num(X(s.optimum->x)) + "\" cy=\"" + num(Y(100 * s.optimum->y)) +
           "\" r=\"6\" fill=\"none\" stroke=\"#2ca02c\" stroke-width=\"2\"/>\n";
    svg += text(X(s.optimum->x) + 8, Y(100 * s.optimum->y) - 8,
                std::string(s.optimum->interior ? "fitted optimum " : "best at the edge ") +
                    seconds_text(s.optimum->x),
                "start", 11);
  }
  return svg + "</svg>\n";
}

std::string badput_svg(const SimulationReport& r) {
  if (r.policies.empty()) return "";
  static const char* kColors[] = {"#d62728", "#ff7f0e", "#1f77b4", "#7f7f7f"};
  double most = 0;
  for (const PolicySummary& s : r.policies) {
    double sum = 0;
    for (const Estimate& b : s.badput) sum += 100 * b.mean;
    most = std::max(most, sum);
  }
  const double xmax = std::max(0.5, most * 1.1);
  const double left = 190;
  auto X = [&](double percent) { return left + percent / xmax * (kW - left - kRight); };
  const double rows = double(r.policies.size());
  const double band = (kH - kTop - kBottom - 30) / rows;
  std::string svg = header("Badput by cause (share of allocated GPU-seconds)");
  for (double v : ticks(0, xmax)) {
    svg += line(X(v), kTop, X(v), kH - kBottom, "stroke=\"#dddddd\"");
    svg += text(X(v), kH - kBottom + 16, num(v), "middle", 11);
  }
  svg += text((left + kW - kRight) / 2, kH - kBottom + 30, "badput (%)");
  for (size_t i = 0; i < r.policies.size(); ++i) {
    const PolicySummary& s = r.policies[i];
    const double y = kTop + band * double(i) + band * 0.2, h = band * 0.6;
    svg += text(left - 8, y + h / 2 + 4, s.policy.name, "end", 12);
    double at = 0;
    for (size_t k = 0; k < s.badput.size(); ++k) {
      const double w = 100 * s.badput[k].mean;
      svg += "<rect x=\"" + num(X(at)) + "\" y=\"" + num(y) + "\" width=\"" +
             num(std::max(0.0, X(at + w) - X(at))) + "\" height=\"" + num(h) + "\" fill=\"" +
             kColors[k] + "\"/>\n";
      at += w;
    }
    svg += text(X(at) + 4, y + h / 2 + 4, num(at) + "%", "start", 11);
  }
  double lx = left;
  const double ly = kH - 6;
  for (size_t k = 0; k < policies::kBadputCauses; ++k) {
    const std::string name(policies::badput_name(static_cast<policies::Badput>(k)));
    svg += "<rect x=\"" + num(lx) + "\" y=\"" + num(ly - 10) +
           "\" width=\"12\" height=\"12\" fill=\"" + kColors[k] + "\"/>\n" +
           text(lx + 16, ly, name, "start", 12);
    lx += 30 + 8 * double(name.size());
  }
  return svg + "</svg>\n";
}

}  // namespace shardguard::sim
