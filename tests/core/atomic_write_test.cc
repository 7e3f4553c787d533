#include <catch2/catch.hpp>

#include <filesystem>

#include "core/fault_fs.h"
#include "tests/support/temp_dir.h"

using namespace shardguard;
using shardguard::testing::slurp;
using shardguard::testing::spit;
using shardguard::testing::TempDir;

namespace {
size_t count_entries(const std::string& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}
}  // namespace

TEST_CASE("atomic_write_file replaces the content and leaves no temp file", "[core]") {
  TempDir dir;
  spit(dir / "m.json", "old");
  REQUIRE(atomic_write_file(PosixFilesystem::instance(), dir / "m.json", "new").ok());
  CHECK(slurp(dir / "m.json") == "new");
  CHECK(count_entries(dir.path()) == 1);
}

TEST_CASE("atomic_write_file: a failure at any step keeps the old content, no temp left",
          "[core][fault]") {
  // open, write, fsync, rename, fsync dir: fail each in turn.
  const int step = GENERATE(1, 2, 3, 4, 5);
  TempDir dir;
  spit(dir / "m.json", "old");
  FaultInjectingFilesystem fs(PosixFilesystem::instance());
  fs.fail_nth_operation(step, ENOSPC);
  auto st = atomic_write_file(fs, dir / "m.json", "new");
  INFO("failing operation " << step);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code() == ErrorCode::kNoSpace);
  // Before the rename the old content stays; a failed directory fsync comes after it.
  CHECK(slurp(dir / "m.json") == (step == 5 ? "new" : "old"));
  CHECK(count_entries(dir.path()) == 1);
}

TEST_CASE("atomic_write_file survives a crash right after it returns", "[core][fault]") {
  TempDir dir;
  FaultInjectingFilesystem fs(PosixFilesystem::instance());
  REQUIRE(atomic_write_file(fs, dir / "m.json", "committed").ok());
  REQUIRE(fs.simulate_crash().ok());
  CHECK(slurp(dir / "m.json") == "committed");
}
