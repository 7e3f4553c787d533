// `shardguard ckpt quarantine / unquarantine`, and what `ls` and `gc` do with quarantined
// steps, driven through the real binary.
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>

#include "checkpoint/paths.h"
#include "tests/checkpoint/step_fixture.h"
#include "tests/support/command.h"

using namespace shardguard;
using shardguard::testing::run_command;
using shardguard::testing::shardguard_bin;
using shardguard::testing::TempDir;
namespace fs = std::filesystem;

namespace {

const testing::StepShape kShape{8, 16};

void write_steps(const std::string& dir, std::initializer_list<uint64_t> steps) {
  for (uint64_t s : steps)
    REQUIRE(
        testing::write_step(PosixFilesystem::instance(), RealClock::instance(), dir, s, 1, kShape)
            .ok());
}

std::string ckpt(const std::string& args) { return shardguard_bin() + " ckpt " + args; }

std::set<std::string> names_in(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename());
  return out;
}

}  // namespace

TEST_CASE("ckpt quarantine sets a step aside: ls shows why, nothing resumes or exports it",
          "[cli]") {
  TempDir dir, out;
  write_steps(dir.path(), {100, 200, 300});
  auto q = run_command(ckpt("quarantine " + dir.path() + " --step 300 --reason 'loss went NaN'"));
  REQUIRE(q.exit_code == 0);
  CHECK_THAT(q.out, Catch::Contains("quarantined step 300"));
  CHECK_FALSE(fs::exists(dir / "step-000000300"));

  auto ls = run_command(ckpt("ls " + dir.path()));
  REQUIRE(ls.exit_code == 0);
  INFO(ls.out);
  const auto section = ls.out.find("QUARANTINED");
  REQUIRE(section != std::string::npos);
  CHECK(ls.out.find("300") > section);  // listed only among the quarantined
  CHECK_THAT(ls.out, Catch::Contains("loss went NaN"));
  CHECK_THAT(ls.out, Catch::Contains("shardguard ckpt quarantine"));  // who

  auto json = run_command(ckpt("ls --json " + dir.path()));
  REQUIRE(json.exit_code == 0);
  CHECK_THAT(json.out, Catch::StartsWith("[{\"step\":200,\"state\":\"complete\""));
  CHECK_THAT(json.out, Catch::Contains("{\"step\":300,\"state\":\"quarantined\""));
  CHECK_THAT(json.out, Catch::Contains("\"quarantine_reason\":\"loss went NaN\""));

  // Not exported, not "latest".
  auto exp = run_command(ckpt("export " + dir.path() + " --step 300 --out " + out.path()));
  CHECK(exp.exit_code == 3);
  CHECK_THAT(exp.err, Catch::Contains("no checkpoint for step 300"));
  auto inspect = run_command(ckpt("inspect " + dir.path()));
  REQUIRE(inspect.exit_code == 0);
  CHECK_THAT(inspect.out, Catch::StartsWith("step 200 "));

  // Back again, then it is the latest once more.
  auto uq = run_command(ckpt("unquarantine " + dir.path() + " --step 300"));
  REQUIRE(uq.exit_code == 0);
  CHECK_THAT(uq.out, Catch::Contains("restored step 300"));
  CHECK_THAT(run_command(ckpt("inspect " + dir.path())).out, Catch::StartsWith("step 300 "));
  CHECK(run_command(ckpt("verify --full " + dir.path())).exit_code == 0);
}

TEST_CASE("ckpt unquarantine is refused once the step was written again", "[cli]") {
  TempDir dir;
  write_steps(dir.path(), {100, 200});
  REQUIRE(run_command(ckpt("quarantine " + dir.path() + " --step 200 --reason bad")).exit_code ==
          0);
  write_steps(dir.path(), {200});  // the rolled-back run reached 200 again
  auto uq = run_command(ckpt("unquarantine " + dir.path() + " --step 200"));
  CHECK(uq.exit_code == 1);
  CHECK_THAT(uq.err, Catch::Contains("written again"));
  CHECK(fs::exists(dir / "quarantine"));
  CHECK(names_in(dir / "quarantine").size() == 1);

  CHECK(run_command(ckpt("quarantine " + dir.path() + " --step 900 --reason x")).exit_code == 1);
  CHECK(run_command(ckpt("quarantine " + dir.path() + " --step 100")).exit_code == 2);  // no reason
}

TEST_CASE("ckpt gc frees quarantined steps past --quarantine-keep, and keeps the others", "[cli]") {
  TempDir dir;
  write_steps(dir.path(), {100, 200, 300, 400});
  REQUIRE(run_command(ckpt("quarantine " + dir.path() + " --step 400 --reason recent")).exit_code ==
          0);
  REQUIRE(run_command(ckpt("quarantine " + dir.path() + " --step 300 --reason old")).exit_code ==
          0);
  // Age the second one: its time is in its name.
  std::string old_name;
  for (const auto& n : names_in(dir / "quarantine"))
    if (n.starts_with("step-000000300-")) old_name = n;
  REQUIRE_FALSE(old_name.empty());
  const std::string aged = checkpoint::quarantine_dir_name({300, 1'000'000'000'000, 1});  // 2001
  fs::rename(dir / ("quarantine/" + old_name), dir / ("quarantine/" + aged));

  auto dry = run_command(ckpt("gc " + dir.path() + " --keep-last 3 --dry-run"));
  REQUIRE(dry.exit_code == 0);
  INFO(dry.out);
  CHECK_THAT(dry.out, Catch::Contains("remove: quarantined"));
  CHECK_THAT(dry.out, Catch::Contains("keep: quarantined"));
  CHECK(names_in(dir / "quarantine").size() == 2);

  auto gc = run_command(ckpt("gc " + dir.path() + " --keep-last 3"));
  REQUIRE(gc.exit_code == 0);
  CHECK_THAT(gc.out, Catch::Contains("removed 0 checkpoint(s) and 1 quarantined step(s)"));
  auto left = names_in(dir / "quarantine");
  REQUIRE(left.size() == 1);
  CHECK(left.begin()->starts_with("step-000000400-"));

  // A shorter keep frees the recent one too; a bad duration is a usage error.
  CHECK(run_command(ckpt("gc " + dir.path() + " --keep-last 3 --quarantine-keep 5x")).exit_code ==
        2);
  REQUIRE(run_command(ckpt("gc " + dir.path() + " --keep-last 3 --quarantine-keep 0")).exit_code ==
          0);
  CHECK(names_in(dir / "quarantine").empty());
}

TEST_CASE("ckpt gc: --keep-last 0 keeps every complete step; symbolic links are never followed",
          "[cli]") {
  TempDir dir, outside;
  write_steps(dir.path(), {100, 200, 300});
  fs::create_directories(dir / "step-000000150");  // an old save that never committed
  write_steps(outside.path(), {50});
  fs::create_directory_symlink(outside / "step-000000050", dir / "step-000000050");

  auto gc = run_command(ckpt("gc " + dir.path() + " --keep-last 0"));
  REQUIRE(gc.exit_code == 0);
  INFO(gc.out);
  CHECK_THAT(gc.out, Catch::Contains("keep_last 0 keeps every complete"));
  CHECK(names_in(dir.path()) == std::set<std::string>{"step-000000050", "step-000000100",
                                                      "step-000000200", "step-000000300"});
  auto gc1 = run_command(ckpt("gc " + dir.path() + " --keep-last 1"));
  REQUIRE(gc1.exit_code == 0);
  CHECK_THAT(gc1.out, Catch::Contains("symbolic link"));
  CHECK(names_in(dir.path()) == std::set<std::string>{"step-000000050", "step-000000300"});
  CHECK(fs::exists(outside / "step-000000050/manifest.json"));
}
