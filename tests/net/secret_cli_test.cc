// `shardguard secret generate` and `check` through the real binary.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "tests/support/command.h"
#include "tests/support/temp_dir.h"

using namespace shardguard::testing;

TEST_CASE("shardguard secret generate writes a 0600 secret that check accepts; never overwrites") {
  TempDir dir;
  const std::string file = dir / "job.secret";
  auto made = run_command(shardguard_bin() + " secret generate " + file);
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  CHECK_THAT(made.out, Catch::Contains("mode 0600"));
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(slurp(file).size() == 65);

  auto checked = run_command(shardguard_bin() + " secret check " + file);
  CHECK(checked.exit_code == 0);
  CHECK_THAT(checked.out, Catch::Contains("ok (64 bytes of secret)"));
  auto by_env =
      run_command("SHARDGUARD_SECRET_FILE=" + file + " " + shardguard_bin() + " secret check");
  CHECK(by_env.exit_code == 0);

  const std::string before = slurp(file);
  auto again = run_command(shardguard_bin() + " secret generate " + file);
  CHECK(again.exit_code == 1);
  CHECK_THAT(again.err, Catch::Contains("'" + file + "'") && Catch::Contains("exists"));
  CHECK(slurp(file) == before);

  REQUIRE(::chmod(file.c_str(), 0644) == 0);
  auto loose = run_command(shardguard_bin() + " secret check " + file);
  CHECK(loose.exit_code == 1);
  CHECK_THAT(loose.err, Catch::Contains("mode 0644"));
}
