// `shardguard simulate` through the binary: the table, the files under --out, --check-config,
// and a config error (exit 2, naming file, line and key).
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/support/command.h"
#include "tests/support/temp_dir.h"

using namespace shardguard::testing;

namespace {

std::string source_dir() {
  const char* s = std::getenv("SHARDGUARD_SOURCE_DIR");
  return s ? s : ".";
}

}  // namespace

TEST_CASE("shardguard simulate writes the table, results.json and the plots",
          "[sim][cli][integration]") {
  TempDir tmp;
  spit(tmp / "fleet.toml", R"([simulation]
duration = "2d"
[job]
nodes = 8
[sweep]
intervals = ["5m", "15m", "30m", "1h"]
)");
  const auto r = run_command(shardguard_bin() + " simulate --config " + (tmp / "fleet.toml") +
                             " --runs 2 --seed 5 --out " + (tmp / "out"));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("| periodic-30m |"));
  CHECK_THAT(r.out, Catch::Contains("| auto+notice |"));
  CHECK_THAT(r.out, Catch::Contains("x 2 seeds (from 5)"));
  CHECK_THAT(r.out, Catch::Contains("Young/Daly point"));
  for (const char* f : {"table.md", "results.json", "badput.svg", "goodput_vs_interval.svg"}) {
    INFO(f);
    CHECK(std::filesystem::file_size(tmp / ("out/" + std::string(f))) > 200);
  }
  CHECK_THAT(slurp(tmp / "out/goodput_vs_interval.svg"), Catch::Contains("</svg>"));
}

TEST_CASE("shardguard simulate on the headline scenario, without the sweep",
          "[sim][cli][integration]") {
  const auto r = run_command(shardguard_bin() + " simulate --config " + source_dir() +
                             "/examples/simulate/fleet.toml --runs 1 --no-sweep");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("128 nodes x 8 GPUs"));
  CHECK_THAT(r.out, Catch::Contains("| auto+notice+elastic |"));
  CHECK_THAT(r.out, !Catch::Contains("Young/Daly point"));
}

TEST_CASE("shardguard simulate refuses a bad config with its file, line and key",
          "[sim][cli][integration]") {
  TempDir tmp;
  spit(tmp / "fleet.toml", "[job]\nnodes = 0\n");
  auto r = run_command(shardguard_bin() + " simulate --config " + (tmp / "fleet.toml"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("fleet.toml:2: job.nodes: must be between 1 and"));
  spit(tmp / "ok.toml", "[job]\nnodes = 4\n");
  r = run_command(shardguard_bin() + " simulate --config " + (tmp / "ok.toml") + " --check-config");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("ok (4 policies)"));
  r = run_command(shardguard_bin() + " simulate --config " + (tmp / "missing.toml"));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("missing.toml"));
}

TEST_CASE(
    "shardguard simulate refuses a trace that is a device or a FIFO, and a fleet beyond the "
    "node limit, instead of reading or allocating without end",
    "[sim][cli][integration]") {
  TempDir tmp;
  REQUIRE(::mkfifo((tmp / "fifo.json").c_str(), 0600) == 0);
  for (const std::string& trace : {std::string("/dev/zero"), tmp / "fifo.json"}) {
    INFO(trace);
    spit(tmp / "fleet.toml", "[job]\nnodes = 4\n[preemption]\ntraces = [\"" + trace + "\"]\n");
    const auto r = run_command("timeout 20 " + shardguard_bin() + " simulate --config " +
                               (tmp / "fleet.toml") + " --check-config");
    CHECK(r.exit_code == 2);  // 124: still reading at the timeout
    CHECK_THAT(r.err, Catch::Contains("not a regular file"));
  }
  spit(tmp / "huge.toml", "[job]\nnodes = 1000000\n");
  const auto r = run_command("timeout 20 " + shardguard_bin() + " simulate --config " +
                             (tmp / "huge.toml") + " --check-config");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("job.nodes: must be between 1 and 65536"));
}
