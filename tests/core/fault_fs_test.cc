#include <catch2/catch.hpp>

#include <filesystem>

#include "core/fault_fs.h"
#include "tests/support/temp_dir.h"

using namespace shardguard;
using shardguard::testing::slurp;
using shardguard::testing::TempDir;

namespace {
std::span<const std::byte> bytes(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}
}  // namespace

TEST_CASE("A crash drops data that was not fsynced", "[core][fault]") {
  TempDir dir;
  FaultInjectingFilesystem fs(PosixFilesystem::instance());
  const std::string path = dir / "data";
  auto file = fs.open_for_write(path, {});
  REQUIRE(file.ok());
  REQUIRE((*file)->append(bytes("durable ")).ok());
  REQUIRE((*file)->sync().ok());
  REQUIRE((*file)->append(bytes("volatile")).ok());
  REQUIRE(fs.sync_dir(dir.path()).ok());  // the file's name is durable
  CHECK(slurp(path) == "durable volatile");

  REQUIRE(fs.simulate_crash().ok());
  CHECK(slurp(path) == "durable ");
  // The handle from before the crash is dead.
  CHECK_FALSE((*file)->append(bytes("x")).ok());
}

TEST_CASE("A crash undoes renames and creations the directory never synced", "[core][fault]") {
  TempDir dir;
  FaultInjectingFilesystem fs(PosixFilesystem::instance());
  auto write_synced = [&](const std::string& p, std::string_view data) {
    auto f = fs.open_for_write(p, {});
    REQUIRE(f.ok());
    REQUIRE((*f)->append(bytes(data)).ok());
    REQUIRE((*f)->sync().ok());
    REQUIRE((*f)->close().ok());
  };
  write_synced(dir / "a.tmp", "A");
  REQUIRE(fs.rename(dir / "a.tmp", dir / "a").ok());
  REQUIRE(fs.sync_dir(dir.path()).ok());
  write_synced(dir / "b.tmp", "B");
  REQUIRE(fs.rename(dir / "b.tmp", dir / "b").ok());  // no sync_dir after this
  write_synced(dir / "c", "C");                       // created, never made durable

  REQUIRE(fs.simulate_crash().ok());
  CHECK(std::filesystem::exists(dir / "a"));
  CHECK_FALSE(std::filesystem::exists(dir / "b"));
  CHECK_FALSE(std::filesystem::exists(dir / "b.tmp"));  // its creation was never durable
  CHECK_FALSE(std::filesystem::exists(dir / "c"));
}

TEST_CASE("The N-th operation fails with the injected errno", "[core][fault]") {
  TempDir dir;
  FaultInjectingFilesystem fs(PosixFilesystem::instance());
  fs.fail_nth_operation(2, ENOSPC);
  auto f = fs.open_for_write(dir / "x", {});  // operation 1
  REQUIRE(f.ok());
  auto st = (*f)->append(bytes("hello"));  // operation 2
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code() == ErrorCode::kNoSpace);
  CHECK_THAT(st.error().message(), Catch::Contains(dir / "x"));
  CHECK((*f)->append(bytes("hello")).ok());  // not sticky: operation 3 passes

  fs.fail_nth_operation(1, EIO, /*sticky=*/true);
  CHECK_FALSE((*f)->sync().ok());
  CHECK_FALSE(fs.rename(dir / "x", dir / "y").ok());
  fs.clear_faults();
  CHECK(fs.rename(dir / "x", dir / "y").ok());
}
