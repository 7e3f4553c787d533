// The simulator's reports: statistics, the fitted optimum, the table, results.json and the
// SVG plots, from a small real run.
#include "sim/report.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cmath>

#include "sim/runner.h"
#include "sim/stats.h"

using namespace shardguard;
using namespace shardguard::sim;

TEST_CASE("Means come with Student's t intervals", "[sim][stats][unit]") {
  const Estimate e = estimate({1, 2, 3, 4});
  CHECK(e.mean == 2.5);
  CHECK(e.stddev == Approx(std::sqrt(5.0 / 3)));
  CHECK(e.half_width == Approx(3.182 * std::sqrt(5.0 / 3) / 2));
  CHECK(estimate({7}).half_width == 0);
  CHECK(t95(1) == Approx(12.706));
  CHECK(t95(1000) == Approx(1.96));
}

TEST_CASE("Polynomial fits recover their polynomial; the optimum is found in ln(x)",
          "[sim][stats][unit]") {
  std::vector<double> x, y;
  for (int i = 0; i < 7; ++i) {
    x.push_back(10 + i);
    y.push_back(3 - 2 * (10 + i) + 0.5 * (10 + i) * (10 + i));
  }
  const auto c = polyfit(x, y, 2);
  REQUIRE(c);
  CHECK((*c)[0] == Approx(3));
  CHECK((*c)[1] == Approx(-2));
  CHECK((*c)[2] == Approx(0.5));
  CHECK_FALSE(polyfit({1, 1, 1}, {1, 2, 3}, 2));
  // A peak at x = 100 in ln(x), sampled around it.
  std::vector<double> px, py;
  for (int i = -4; i <= 4; ++i) {
    px.push_back(100 * std::exp(0.2 * i));
    py.push_back(1 - 0.1 * std::pow(0.2 * i, 2));
  }
  const auto o = fitted_maximum(px, py);
  REQUIRE(o);
  CHECK(o->interior);
  CHECK(o->x == Approx(100).epsilon(1e-3));
  const auto local = fitted_maximum(px, py, 5);
  REQUIRE(local);
  CHECK(local->x == Approx(100).epsilon(1e-3));
  // A monotone curve has its best at an end.
  const auto edge = fitted_maximum({1, 2, 3, 4}, {1, 2, 3, 4});
  REQUIRE(edge);
  CHECK_FALSE(edge->interior);
}

TEST_CASE("The table, results.json and the plots of a small simulation", "[sim][report][unit]") {
  FleetConfig c;
  c.job.nodes = 8;
  c.duration = 3 * 86400;
  c.policies = default_policies(c.job);
  c.policies[0].name = "periodic <30m> & co";  // names are escaped in SVG
  c.sweep.intervals = {300, 900, 1800, 3600, 7200};
  RunnerOptions o;
  o.runs = 3;
  const SimulationReport rep = run_simulation(c, o);
  REQUIRE(rep.policies.size() == 4);
  for (const auto& s : rep.policies) {
    CHECK(s.goodput.n == 3);
    CHECK(s.goodput.mean > 0.5);
    CHECK(s.goodput.mean <= 1);
  }
  REQUIRE(rep.sweep);
  CHECK(rep.sweep->points.size() == 5);
  CHECK(rep.sweep->base == "auto+notice");

  const std::string table = render_table(c, rep);
  CHECK_THAT(table, Catch::Contains(
                        "| auto+notice+elastic | auto (Young/Daly) | emergency checkpoint | 7 |"));
  CHECK_THAT(render_sweep(rep), Catch::Contains("Young/Daly point"));

  const auto json = boost::json::parse(render_json(c, rep));
  CHECK(json.at("policies").as_array().size() == 4);
  CHECK(json.at("sweep").at("points").as_array().size() == 5);
  CHECK(json.at("policies").as_array()[2].at("badput").as_object().contains("recompute"));

  const std::string plot = goodput_vs_interval_svg(rep);
  CHECK_THAT(plot, Catch::StartsWith("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  CHECK_THAT(plot, Catch::Contains("Young/Daly"));
  CHECK_THAT(plot, Catch::EndsWith("</svg>\n"));
  CHECK(std::count(plot.begin(), plot.end(), '<') == std::count(plot.begin(), plot.end(), '>'));
  const std::string bars = badput_svg(rep);
  CHECK_THAT(bars, Catch::Contains("periodic &lt;30m&gt; &amp; co"));
  CHECK_THAT(bars, Catch::Contains("recompute"));
}
