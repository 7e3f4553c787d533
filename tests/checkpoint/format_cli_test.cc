// `shardguard ckpt` on format versions, driven as a user would: `verify --full` names the
// bad block's offset and exits 3; `ls` and `verify` say "written by a newer shardguard" for
// a manifest of a newer format; a format-1 checkpoint verifies.
#include <catch2/catch.hpp>
#include <filesystem>

#include "core/clock.h"
#include "tests/checkpoint/step_fixture.h"
#include "tests/checkpoint/tensor_fixtures.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"

namespace shardguard::checkpoint {
namespace {

using shardguard::testing::run_command;

std::string ckpt(const std::string& args) {
  return shardguard::testing::shardguard_bin() + " ckpt " + args;
}

Filesystem& fs() { return PosixFilesystem::instance(); }

TEST_CASE("ckpt verify --full names the bad block", "[cli][format]") {
  shardguard::testing::TempDir dir;
  FakeClock clock;
  REQUIRE(shardguard::testing::write_step(fs(), clock, dir.path(), 200, 2, {300, 4096}).ok());
  auto ok = run_command(ckpt("verify --full " + dir.path()));
  CHECK(ok.exit_code == 0);
  CHECK_THAT(ok.out, Catch::Contains("block"));
  const std::string shard = dir / "step-000000200/shard-00001-of-00002.safetensors";
  auto bytes = testing::read_bytes(shard);
  bytes[(2 << 20) + 5] ^= std::byte{0x40};
  testing::write_bytes(shard, bytes);
  CHECK(run_command(ckpt("verify " + dir.path())).exit_code == 0);  // sizes only
  auto full = run_command(ckpt("verify --full " + dir.path()));
  CHECK(full.exit_code == 3);
  CHECK_THAT(full.err, Catch::Contains("step-000000200/shard-00001-of-00002.safetensors: block "
                                       "at offset 2097152 (2 MiB) fails its checksum"));
}

TEST_CASE("ckpt ls and verify say 'written by a newer shardguard'", "[cli][format]") {
  shardguard::testing::TempDir dir;
  FakeClock clock;
  REQUIRE(shardguard::testing::write_step(fs(), clock, dir.path(), 100, 1, {8, 16}).ok());
  REQUIRE(shardguard::testing::write_step(fs(), clock, dir.path(), 200, 1, {8, 16}).ok());
  const std::string manifest = dir / "step-000000200/manifest.json";
  std::string text = shardguard::testing::slurp(manifest);
  text.replace(text.find(R"("version":2)"), 11, R"("version":9)");
  shardguard::testing::spit(manifest, text);
  const std::string why = "written by a newer shardguard (format 9; this build reads up to 2)";

  auto ls = run_command(ckpt("ls " + dir.path()));
  CHECK(ls.exit_code == 0);
  CHECK_THAT(ls.out, Catch::Contains("newer") && Catch::Contains(why));
  auto verify = run_command(ckpt("verify " + dir.path() + " --step 200"));
  CHECK(verify.exit_code == 3);
  CHECK_THAT(verify.err, Catch::Contains(why));
  CHECK_THAT(verify.err, !Catch::Contains("corrupt"));
  // Without --step, the newest complete one is 100.
  auto latest = run_command(ckpt("verify --full " + dir.path()));
  CHECK(latest.exit_code == 0);
  CHECK_THAT(latest.out, Catch::Contains("step 100"));
}

TEST_CASE("ckpt verify --full of a format-1 checkpoint", "[cli][format]") {
  shardguard::testing::TempDir dir;
  std::filesystem::copy(std::string(SG_V1_FIXTURE) + "/step-000000005", dir / "step-000000005",
                        std::filesystem::copy_options::recursive);
  auto full = run_command(ckpt("verify --full " + dir.path()));
  CHECK(full.exit_code == 0);
  CHECK_THAT(full.out, Catch::Contains("step 5: complete"));
}

}  // namespace
}  // namespace shardguard::checkpoint
