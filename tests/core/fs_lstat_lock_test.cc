// The filesystem seam's lstat, tree size and flock: links are reported, not followed; a
// lock is exclusive between open files (even in one process), dies with its holder, and the
// fault filesystem can play a filesystem without locks.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "core/fault_fs.h"
#include "tests/support/temp_dir.h"

using namespace shardguard;
using shardguard::testing::spit;
using shardguard::testing::TempDir;
namespace stdfs = std::filesystem;

TEST_CASE("path_kind reports what a path is without following a link", "[core]") {
  TempDir dir;
  auto& fs = PosixFilesystem::instance();
  spit(dir / "file", "x");
  stdfs::create_directories(dir / "sub");
  stdfs::create_directory_symlink(dir / "sub", dir / "link");
  stdfs::create_symlink(dir / "nowhere", dir / "dangling");
  CHECK(*fs.path_kind(dir / "file") == PathKind::kFile);
  CHECK(*fs.path_kind(dir / "sub") == PathKind::kDirectory);
  CHECK(*fs.path_kind(dir / "link") == PathKind::kSymlink);
  CHECK(*fs.path_kind(dir / "dangling") == PathKind::kSymlink);
  CHECK(*fs.path_kind(dir / "missing") == PathKind::kMissing);
  CHECK(*fs.path_kind(dir / "file/below") == PathKind::kMissing);

  auto entries = fs.list(dir.path());
  REQUIRE(entries.ok());
  for (const auto& e : *entries) {
    INFO(e.name);
    CHECK(e.is_symlink == (e.name == "link" || e.name == "dangling"));
  }
  // The fault filesystem passes it through.
  FaultInjectingFilesystem faulty(fs);
  CHECK(*faulty.path_kind(dir / "link") == PathKind::kSymlink);
}

TEST_CASE("tree_bytes counts regular files and never follows links", "[core]") {
  TempDir dir;
  auto& fs = PosixFilesystem::instance();
  stdfs::create_directories(dir / "t/a/b");
  spit(dir / "t/one", std::string(100, 'x'));
  spit(dir / "t/a/b/two", std::string(23, 'y'));
  spit(dir / "big", std::string(5000, 'z'));
  stdfs::create_symlink(dir / "big", dir / "t/link-to-big");
  stdfs::create_directory_symlink(dir.path(), dir / "t/a/loop");
  CHECK(*tree_bytes(fs, dir / "t") == 123);
  CHECK(*tree_bytes(fs, dir / "t/one") == 100);
  CHECK(*tree_bytes(fs, dir / "missing") == 0);
}

TEST_CASE("try_lock_file is exclusive, released with its object and with its process", "[core]") {
  TempDir dir;
  auto& fs = PosixFilesystem::instance();
  const std::string path = dir / "lock";

  auto first = fs.try_lock_file(path);
  REQUIRE(first.ok());
  REQUIRE(first->status == LockStatus::kAcquired);
  REQUIRE(first->lock != nullptr);
  CHECK(first->lock->path() == path);
  CHECK(stdfs::exists(path));  // created

  // Another open file in the same process is refused: flock belongs to the open file.
  auto second = fs.try_lock_file(path);
  REQUIRE(second.ok());
  CHECK(second->status == LockStatus::kHeld);
  CHECK(second->lock == nullptr);

  first->lock.reset();
  auto third = fs.try_lock_file(path);
  REQUIRE(third.ok());
  CHECK(third->status == LockStatus::kAcquired);
  third->lock.reset();

  SECTION("a process killed with SIGKILL frees the lock") {
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      auto held = PosixFilesystem::instance().try_lock_file(path);
      char c = (held.ok() && held->status == LockStatus::kAcquired) ? 'y' : 'n';
      (void)!::write(ready[1], &c, 1);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char c = 0;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    ::close(ready[0]);
    REQUIRE(c == 'y');
    CHECK(fs.try_lock_file(path)->status == LockStatus::kHeld);
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK(fs.try_lock_file(path)->status == LockStatus::kAcquired);
  }
}

TEST_CASE("The fault filesystem plays a filesystem without flock", "[core][fault]") {
  TempDir dir;
  FaultInjectingFilesystem fs(PosixFilesystem::instance());
  const std::string path = dir / "lock";
  auto err = GENERATE(ENOLCK, EOPNOTSUPP);
  fs.set_lock_errno(err);
  auto r = fs.try_lock_file(path);
  REQUIRE(r.ok());
  CHECK(r->status == LockStatus::kUnsupported);
  CHECK(r->sys_errno == err);
  CHECK(r->lock == nullptr);

  fs.set_lock_errno(EWOULDBLOCK);
  CHECK(fs.try_lock_file(path)->status == LockStatus::kHeld);
  fs.set_lock_errno(EIO);
  auto io = fs.try_lock_file(path);
  REQUIRE_FALSE(io.ok());
  CHECK_THAT(io.error().message(), Catch::Contains("flock '" + path + "'"));

  fs.set_lock_errno(0);  // through to the real one again
  auto real = fs.try_lock_file(path);
  REQUIRE(real.ok());
  CHECK(real->status == LockStatus::kAcquired);
  // A lock is a mutating operation that an armed fault can fail (it may create the file).
  fs.fail_nth_operation(1, ENOSPC);
  CHECK(fs.try_lock_file(dir / "other").error().code() == ErrorCode::kNoSpace);
}

TEST_CASE("A filesystem without the new calls says so instead of guessing", "[core]") {
  // The base class defaults: no lstat (callers refuse to act), no locks (timestamps only).
  class Minimal final : public Filesystem {
   public:
    Result<std::unique_ptr<WritableFile>> open_for_write(const std::string&, OpenOptions) override {
      return Error(ErrorCode::kUnsupported, "");
    }
    Result<std::unique_ptr<MappedFile>> map_readonly(const std::string&) override {
      return Error(ErrorCode::kUnsupported, "");
    }
    Result<std::string> read_file(const std::string&) override {
      return Error(ErrorCode::kUnsupported, "");
    }
    Status rename(const std::string&, const std::string&) override { return {}; }
    Status sync_dir(const std::string&) override { return {}; }
    Result<std::vector<DirEntry>> list(const std::string&) override {
      return std::vector<DirEntry>{};
    }
    Status remove(const std::string&) override { return {}; }
    Status remove_all(const std::string&) override { return {}; }
    Status create_dirs(const std::string&) override { return {}; }
    Result<uint64_t> file_size(const std::string&) override { return uint64_t{0}; }
    Result<bool> exists(const std::string&) override { return false; }
    Result<uint64_t> free_space(const std::string&) override { return uint64_t{0}; }
  } fs;
  CHECK(fs.path_kind("/x").error().code() == ErrorCode::kUnsupported);
  auto lock = fs.try_lock_file("/x");
  REQUIRE(lock.ok());
  CHECK(lock->status == LockStatus::kUnsupported);
}
