// The simulator against theory: Daly's optimum checkpoint intervals (restart 10 min,
// checkpoint 5 min: 116.7, 56.7 and 9.1 min of compute for an MTBF of 24 h, 6 h and 15 min)
// found from simulated goodput within 5%, with common random numbers across intervals and the
// optimum of a cubic fitted in ln(tau); and the simulated goodput at every interval against the
// exact goodput of the simulated process. CI runs a reduced form (2 x 10^4 failures per point);
// the `slow` registration (SHARDGUARD_DALY_FULL=1) runs >= 10^5 failures per point.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "sim/stats.h"
#include "tests/sim/daly_scenario.h"

using namespace shardguard;
using namespace shardguard::testing;

namespace {

bool full_check() {
  const char* f = std::getenv("SHARDGUARD_DALY_FULL");
  return f != nullptr && std::string(f) == "1";
}

}  // namespace

TEST_CASE("The fitted optimum of Daly's exact goodput curve is Daly's optimum",
          "[sim][daly][unit]") {
  const auto [mtbf_min, daly_min] =
      GENERATE(table<double, double>({{1440, 116.7}, {360, 56.7}, {15, 9.1}}));
  const double mtbf = mtbf_min * 60;
  std::vector<double> x, y;
  for (double tau : daly_grid(mtbf)) {
    x.push_back(tau);
    // Daly's own model (failures during the restart restart it) has the same optimum.
    y.push_back(daly_goodput(mtbf, tau));
  }
  const auto opt = sim::fitted_maximum(x, y);
  REQUIRE(opt);
  CHECK(opt->interior);
  CHECK(opt->x / 60 == Approx(daly_min).epsilon(0.015));
}

TEST_CASE("Simulated goodput finds Daly's optimum checkpoint interval within 5%", "[sim][daly]") {
  const auto [mtbf_min, daly_min] =
      GENERATE(table<double, double>({{1440, 116.7}, {360, 56.7}, {15, 9.1}}));
  const double mtbf = mtbf_min * 60;
  const bool full = full_check();
  const uint32_t replications = full ? 10 : 4;
  const double failures_per_replication = full ? 10'500 : 5'000;
  const double duration = failures_per_replication * (mtbf + kDalyRestart);  // about that many hit
  const auto points = daly_sweep(mtbf, daly_grid(mtbf), replications, duration, 20240601);
  INFO("MTBF " << mtbf_min << " min, " << points.front().failures << " failures per point");
  std::vector<double> x, y;
  for (const auto& p : points) {
    x.push_back(p.tau);
    y.push_back(p.goodput);
    const double theory = daly_goodput(mtbf, p.tau);
    INFO("tau " << p.tau / 60 << " min: simulated " << p.goodput << ", exact " << theory);
    CHECK(p.goodput == Approx(theory).epsilon(full ? 0.015 : 0.03));
    CHECK(p.failures == points.front().failures);  // common random numbers: the same failures
  }
  CHECK(points.front().failures >= (full ? 100'000u : 19'000u));
  const auto opt = sim::fitted_maximum(x, y);
  REQUIRE(opt);
  CHECK(opt->interior);
  WARN("MTBF " << mtbf_min << " min: simulated optimum " << opt->x / 60 << " min, Daly " << daly_min
               << " min (" << points.front().failures << " failures per point)");
  CHECK(opt->x / 60 == Approx(daly_min).epsilon(0.05));
}
