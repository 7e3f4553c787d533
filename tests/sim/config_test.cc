// fleet.toml, the calibration JSON and spot traces: defaults are the headline scenario, every
// key is read, and every mistake names the file, line and key.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>

#include "sim/calibration.h"
#include "sim/fleet_config.h"
#include "sim/spot_trace.h"
#include "tests/support/temp_dir.h"

using namespace shardguard;
using namespace shardguard::sim;
using shardguard::testing::spit;
using shardguard::testing::TempDir;

namespace {

std::string source_dir() {
  const char* s = std::getenv("SHARDGUARD_SOURCE_DIR");
  return s ? s : ".";
}

Result<FleetConfig> parse(const std::string& text, const std::string& dir = "") {
  return parse_fleet_config(text, "fleet.toml", dir);
}

}  // namespace

TEST_CASE("An empty fleet.toml is the headline scenario", "[sim][config][unit]") {
  auto c = parse("");
  REQUIRE(c.ok());
  CHECK(c->job.nodes == 128);
  CHECK(c->job.gpus_per_node == 8);
  CHECK(c->calibration.state_bytes == Approx(980e9));
  CHECK(save_seconds(c->calibration, 128) == Approx(980e9 / 100e9 + 0.5));  // aggregate-bound
  CHECK(save_seconds(c->calibration, 8) == Approx(980e9 / 40e9 + 0.5));     // per-node-bound
  CHECK(c->preemption.cloud == Cloud::kGcp);
  CHECK(c->preemption.notice == 30);
  CHECK(1 - std::exp(-c->preemption.hazard * 86400) == Approx(0.05));
  // Llama 3: 419 interruptions in 54 days on 16,384 GPUs, scaled to 1,024: about 50 h.
  CHECK(job_mtbf_seconds(c->failures, 1024) / 3600 == Approx(54.0 * 24 * 16 / 419));
  CHECK(c->costs.node_replacement == 120);
  CHECK(c->costs.spare_nodes == 0);
  REQUIRE(c->policies.size() == 4);
  CHECK(c->policies[0].name == "periodic-30m");
  CHECK(c->policies[3].min_nodes == 120);
}

TEST_CASE("The shipped examples parse", "[sim][config][unit]") {
  const std::string name = GENERATE(as<std::string>{}, "fleet.toml", "fleet-120s.toml",
                                    "fleet-traces.toml", "fleet-availability.toml", "daly-6h.toml");
  INFO(name);
  auto c = load_fleet_config(source_dir() + "/examples/simulate/" + name);
  REQUIRE(c.ok());
  if (name == "fleet-120s.toml") {
    CHECK(c->preemption.cloud == Cloud::kAws);
    CHECK(c->preemption.notice == 120);
  }
  if (name == "fleet-traces.toml") CHECK_FALSE(c->preemption.traces.empty());
}

TEST_CASE("Every key is read with its unit", "[sim][config][unit]") {
  auto c = parse(R"(
[simulation]
duration = "7d"
runs = 3
seed = 42
[job]
nodes = 16
gpus_per_node = 4
step_time = "2s"
state_size = "64GB"
[storage]
write_per_node = "2GB/s"
aggregate_write = "10GB/s"
async = false
commit = "0s"
[costs]
scheduler = "kubernetes"
spare_nodes = 2
[restart]
hang_timeout = "0s"
unlimited_budgets = true
[failures]
model = "exponential"
mtbf = "10h"
[preemption]
cloud = "aws"
aws_bucket = ">20%"
[[policy]]
name = "fixed"
interval = "time"
every = "15m"
emergency = false
[[policy]]
name = "elastic"
min_nodes = 12
[sweep]
policy = "elastic"
intervals = ["5m", "1h"]
)");
  REQUIRE(c.ok());
  CHECK(c->duration == 7 * 86400);
  CHECK(c->runs == 3);
  CHECK(c->seed == 42);
  CHECK(c->job.step_seconds == 2);
  CHECK(save_seconds(c->calibration, 16) == Approx(64e9 / 10e9));  // sync: no stall first
  CHECK(stall_seconds(c->calibration, 16, 4) == Approx(6.4));      // the loop waits for all
  CHECK(c->costs.requeue == 30);
  CHECK(c->costs.spare_nodes == 2);
  CHECK(c->restart.hang_timeout == 0);
  CHECK(job_mtbf_seconds(c->failures, 64) == Approx(36000));
  CHECK(c->preemption.notice == 120);
  CHECK(1 - std::exp(-c->preemption.hazard * 30 * 86400) == Approx(0.25));
  REQUIRE(c->policies.size() == 2);
  CHECK(c->policies[0].every == 900);
  CHECK(c->policies[1].interval == policies::IntervalMode::kAuto);
  CHECK(c->sweep.intervals == std::vector<double>{300, 3600});
}

TEST_CASE("Mistakes name the file, line and key", "[sim][config][unit]") {
  SECTION("unknown key") {
    auto c = parse("[job]\nnodes = 4\nnodse = 5\n");
    REQUIRE_FALSE(c.ok());
    CHECK_THAT(c.error().message(), Catch::Contains("fleet.toml:3: job.nodse: unknown key"));
  }
  SECTION("bad duration and bandwidth, both reported") {
    auto c = parse("[job]\nstep_time = \"5 parsecs\"\n[storage]\nwrite_per_node = \"5GB\"\n");
    REQUIRE_FALSE(c.ok());
    CHECK_THAT(c.error().message(), Catch::Contains("fleet.toml:2: job.step_time"));
    CHECK_THAT(c.error().message(), Catch::Contains("fleet.toml:4: storage.write_per_node"));
  }
  SECTION("unknown AWS bucket") {
    auto c = parse("[preemption]\ncloud = \"aws\"\naws_bucket = \"25%\"\n");
    REQUIRE_FALSE(c.ok());
    CHECK_THAT(c.error().message(),
               Catch::Contains("preemption.aws_bucket: unknown AWS advisor bucket"));
  }
  SECTION("a sweep of a policy that does not exist") {
    auto c = parse("[sweep]\npolicy = \"nope\"\n");
    REQUIRE_FALSE(c.ok());
    CHECK_THAT(c.error().message(), Catch::Contains("no [[policy]] is named 'nope'"));
  }
  SECTION("min_nodes above the job") {
    auto c = parse("[job]\nnodes = 4\n[[policy]]\nname = \"x\"\nmin_nodes = 5\n");
    REQUIRE_FALSE(c.ok());
    CHECK_THAT(c.error().message(), Catch::Contains("min_nodes 5 is above the job's 4 nodes"));
  }
  SECTION("a missing trace file") {
    auto c = parse("[preemption]\ntraces = [\"nope.json\"]\n", "/nonexistent");
    REQUIRE_FALSE(c.ok());
    CHECK_THAT(c.error().message(), Catch::Contains("fleet.toml:2: preemption.traces"));
    CHECK_THAT(c.error().message(), Catch::Contains("/nonexistent/nope.json"));
  }
}

TEST_CASE("The calibration JSON overrides the figures it holds", "[sim][config][unit]") {
  TempDir tmp;
  spit(tmp / "cal.json",
       R"({"save_gbps_per_node": 2.5, "snapshot_seconds_per_gib": 0.5, "bench_version": "x"})");
  spit(tmp / "fleet.toml", "[storage]\ncalibration = \"cal.json\"\naggregate_write = \"1TB/s\"\n");
  auto c = load_fleet_config(tmp / "fleet.toml");
  REQUIRE(c.ok());
  CHECK(c->calibration.save_per_node == 2.5e9);
  CHECK(c->calibration.snapshot_seconds_per_gib == 0.5);
  CHECK(c->calibration.load_per_node == 5e9);  // not in the file: the default stays
  CHECK(save_seconds(c->calibration, 128) == Approx(980e9 / 320e9 + 0.5));

  Calibration k;
  auto bad = parse_calibration_json(R"({"load_gbps_per_node": -1})", "cal.json", k);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message(),
             Catch::Contains("cal.json': load_gbps_per_node: must be positive"));
  CHECK_FALSE(parse_calibration_json("[1]", "cal.json", k).ok());
}

TEST_CASE("Spot traces in the skypilot shape", "[sim][config][unit]") {
  auto t = parse_spot_trace(R"({"metadata": {"gap_seconds": 600, "zone": "x"}, "data": [0, 1, 2]})",
                            "t.json");
  REQUIRE(t.ok());
  CHECK(t->gap_seconds == 600);
  CHECK(t->data == std::vector<int64_t>{0, 1, 2});
  CHECK(t->length_seconds() == 1800);
  auto bad = GENERATE(as<std::string>{}, R"({"data": [1]})",
                      R"({"metadata": {"gap_seconds": 0}, "data": [1]})",
                      R"({"metadata": {"gap_seconds": 60}, "data": [1, "x"]})",
                      R"({"metadata": {"gap_seconds": 60}, "data": []})", "not json");
  INFO(bad);
  auto r = parse_spot_trace(bad, "t.json");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message(), Catch::StartsWith("spot trace 't.json': "));
}
