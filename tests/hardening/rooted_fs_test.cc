// RootedFilesystem (core/rooted_fs.h) on real directories: the root may be a link, nothing
// below it is followed, only regular files are opened as files, modes are exact whatever
// the umask, a configured group is given to what it creates, and removals never reach
// outside the root, even when a directory is swapped for a link mid-removal.
#include "core/rooted_fs.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "checkpoint/retention.h"
#include "core/fault_fs.h"
#include "tests/support/temp_dir.h"

using namespace shardguard;
using shardguard::testing::slurp;
using shardguard::testing::spit;
using shardguard::testing::TempDir;
namespace stdfs = std::filesystem;

namespace {

std::unique_ptr<RootedFilesystem> rooted(const std::string& root) {
  RootOptions o;
  o.path = root;
  return RootedFilesystem::single(std::move(o));
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// Restores the umask when the test ends.
struct UmaskGuard {
  explicit UmaskGuard(mode_t m) : old(::umask(m)) {}
  ~UmaskGuard() { ::umask(old); }
  mode_t old;
};

std::string text(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

}  // namespace

TEST_CASE("rooted fs: the root may be a link; reads and writes below it work", "[unit]") {
  TempDir dir;
  stdfs::create_directories(dir / "real/sub");
  stdfs::create_directory_symlink(dir / "real", dir / "ckpt");  // checkpoints -> /mnt/nvme/...
  spit(dir / "real/sub/a", "hello");
  auto fs = rooted(dir / "ckpt");
  CHECK(*fs->read_file(dir / "ckpt/sub/a") == "hello");
  CHECK(text((*fs->map_readonly(dir / "ckpt/sub/a"))->bytes()) == "hello");
  CHECK(*fs->file_size(dir / "ckpt/sub/a") == 5);
  CHECK(*fs->path_kind(dir / "ckpt") == PathKind::kDirectory);
  CHECK(*fs->path_kind(dir / "ckpt/sub") == PathKind::kDirectory);
  CHECK(*fs->path_kind(dir / "ckpt/nothing") == PathKind::kMissing);
  CHECK(*fs->path_kind(dir / "ckpt/sub/a/below") == PathKind::kMissing);
  REQUIRE(atomic_write_file(*fs, dir / "ckpt/sub/b", "world").ok());
  CHECK(slurp(dir / "real/sub/b") == "world");
  REQUIRE(fs->create_dirs(dir / "ckpt/x/y").ok());
  CHECK(stdfs::is_directory(dir / "real/x/y"));
  REQUIRE(fs->rename(dir / "ckpt/sub/b", dir / "ckpt/x/y/b").ok());
  CHECK(slurp(dir / "real/x/y/b") == "world");
  REQUIRE(fs->sync_dir(dir / "ckpt/x").ok());
  CHECK(*fs->free_space(dir / "ckpt/x") > 0);
  auto lock = fs->try_lock_file(dir / "ckpt/lock");
  REQUIRE(lock.ok());
  CHECK(lock->status == LockStatus::kAcquired);
  // Relative and absolute spellings of the same place are the same root.
  const std::string cwd = stdfs::current_path();
  stdfs::current_path(dir.path());
  CHECK(*rooted("ckpt")->read_file(dir / "ckpt/sub/a") == "hello");
  CHECK(*rooted(dir / "ckpt")->read_file("ckpt/./sub//a") == "hello");
  stdfs::current_path(cwd);
}

TEST_CASE("rooted fs: the held root lists the same every time, from any thread", "[unit]") {
  TempDir dir;
  for (const char* name : {"a", "b", "c"})
    stdfs::create_directories(dir / ("ckpt/" + std::string(name)));
  auto fs = rooted(dir / "ckpt");
  // Each listing reads the held root afresh (a shared read position would leave the second
  // one empty: `shardguard run` listed its checkpoints at start and again to resume).
  for (int i = 0; i < 3; ++i) CHECK(fs->list(dir / "ckpt")->size() == 3);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        if (fs->list(dir / "ckpt")->size() != 3) ++wrong;
    });
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
}

TEST_CASE("rooted fs: a link below the root is never followed, and is named", "[unit]") {
  TempDir dir;
  stdfs::create_directories(dir / "ckpt/step");
  stdfs::create_directories(dir / "outside");
  spit(dir / "outside/secret", "root-only bytes");
  stdfs::create_directory_symlink(dir / "outside", dir / "ckpt/linked");
  stdfs::create_symlink(dir / "outside/secret", dir / "ckpt/step/shard");
  auto fs = rooted(dir / "ckpt");

  const std::string through_dir = dir / "ckpt/linked/secret";
  const std::string last = dir / "ckpt/step/shard";
  for (const std::string& path : {through_dir, last}) {
    INFO(path);
    const std::string named = path == last ? last : dir / "ckpt/linked";
    auto expect_refused = [&](const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalid);
      CHECK_THAT(e.message(), Catch::Contains("'" + named + "' is a symbolic link"));
      CHECK_THAT(e.message(), !Catch::Contains("root-only bytes"));
    };
    expect_refused(fs->read_file(path).error());
    expect_refused(fs->map_readonly(path).error());
    expect_refused(fs->open_for_read(path, {}).error());
    expect_refused(fs->open_for_read(path, {.direct = true}).error());
    expect_refused(fs->file_size(path).error());
    expect_refused(fs->open_for_write(path, {}).error());
    expect_refused(fs->try_lock_file(path).error());
  }
  CHECK(*fs->path_kind(last) == PathKind::kSymlink);
  CHECK(*fs->exists(last));
  CHECK_FALSE(fs->path_kind(through_dir).ok());
  CHECK_FALSE(fs->list(dir / "ckpt/linked").ok());
  CHECK_FALSE(fs->create_dirs(dir / "ckpt/linked/new").ok());
  CHECK_FALSE(stdfs::exists(dir / "outside/new"));
  // An exclusive create on a planted link fails instead of writing through it.
  auto excl = fs->open_for_write(last, {.exclusive = true});
  REQUIRE_FALSE(excl.ok());
  CHECK_THAT(excl.error().message(), Catch::Contains("symbolic link"));
  CHECK(slurp(dir / "outside/secret") == "root-only bytes");
  // Listing shows the links as links, not as directories.
  auto entries = fs->list(dir / "ckpt");
  REQUIRE(entries.ok());
  for (const auto& e : *entries) {
    INFO(e.name);
    CHECK(e.is_dir == (e.name == "step"));
    CHECK(e.is_symlink == (e.name == "linked"));
  }
}

TEST_CASE("rooted fs: '..' below the root and paths outside it are refused", "[unit]") {
  TempDir dir;
  stdfs::create_directories(dir / "ckpt");
  spit(dir / "other", "x");
  auto fs = rooted(dir / "ckpt");
  CHECK_THAT(fs->read_file(dir / "ckpt/../other").error().message(), Catch::Contains("'..'"));
  CHECK_THAT(fs->read_file(dir / "other").error().message(), Catch::Contains("outside"));
  // With an outside filesystem those paths are served by it (the supervisor reads /proc).
  std::vector<RootOptions> roots(1);
  roots[0].path = dir / "ckpt";
  RootedFilesystem with_outside(std::move(roots), &PosixFilesystem::instance());
  CHECK(*with_outside.read_file(dir / "other") == "x");
}

TEST_CASE("rooted fs: a FIFO or a device is refused at once, never read", "[unit]") {
  TempDir dir;
  stdfs::create_directories(dir / "ckpt");
  REQUIRE(::mkfifo((dir / "ckpt/fifo").c_str(), 0600) == 0);
  auto fs = rooted(dir / "ckpt");
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& path : {dir / "ckpt/fifo"}) {
    CHECK_THAT(fs->read_file(path).error().message(), Catch::Contains("a FIFO"));
    CHECK_THAT(fs->map_readonly(path).error().message(), Catch::Contains("a FIFO"));
    CHECK_THAT(fs->open_for_read(path, {}).error().message(), Catch::Contains("a FIFO"));
    CHECK_THAT(fs->open_for_write(path, {}).error().message(), Catch::Contains("a FIFO"));
    CHECK_THAT(fs->file_size(path).error().message(), Catch::Contains("a FIFO"));
    CHECK(*fs->path_kind(path) == PathKind::kOther);
  }
  if (::geteuid() == 0) {  // a device node where a file is expected (mknod needs root)
    REQUIRE(::mknod((dir / "ckpt/zero").c_str(), S_IFCHR | 0600, makedev(1, 5)) == 0);
    CHECK_THAT(fs->read_file(dir / "ckpt/zero").error().message(),
               Catch::Contains("a character device"));
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
}

TEST_CASE("rooted fs: modes are exact whatever the umask", "[unit]") {
  UmaskGuard guard(0);
  TempDir dir;
  auto fs = rooted(dir / "run");
  REQUIRE(fs->create_dirs(dir / "run/attempt-0").ok());  // creates the root too
  CHECK(mode_of(dir / "run") == 0750);
  CHECK(mode_of(dir / "run/attempt-0") == 0750);
  auto f = fs->open_for_write(dir / "run/events.jsonl", {});
  REQUIRE(f.ok());
  CHECK(mode_of(dir / "run/events.jsonl") == 0640);
  REQUIRE(atomic_write_file(*fs, dir / "run/attempt-0/hang.txt", "x").ok());
  CHECK(mode_of(dir / "run/attempt-0/hang.txt") == 0640);
  REQUIRE(fs->try_lock_file(dir / "run/lock").ok());
  CHECK(mode_of(dir / "run/lock") == 0640);
  // A stricter umask does not decide either: group members may read what the job wrote.
  UmaskGuard strict(077);
  REQUIRE(fs->create_dirs(dir / "run/attempt-1").ok());
  CHECK(mode_of(dir / "run/attempt-1") == 0750);
  // The plain filesystem's modes are narrowed by a umask but never widened past 0750/0640.
  ::umask(0);
  REQUIRE(PosixFilesystem::instance().create_dirs(dir / "plain/a").ok());
  CHECK(mode_of(dir / "plain/a") == 0750);
  REQUIRE(PosixFilesystem::instance().open_for_write(dir / "plain/f", {}).ok());
  CHECK(mode_of(dir / "plain/f") == 0640);
}

TEST_CASE("rooted fs: O_DIRECT writes of new files, exclusive, with exact modes", "[unit]") {
  UmaskGuard guard(0);
  TempDir dir;
  auto fs = rooted(dir / "ckpt");
  REQUIRE(fs->create_dirs(dir / "ckpt").ok());
  auto buffer = DirectIoBuffer::allocate(kDirectReadAlignment);
  REQUIRE(buffer.ok());
  std::memset((*buffer)->data(), 'x', kDirectReadAlignment);
  auto f = fs->open_for_write(dir / "ckpt/shard", {.exclusive = true, .direct = true});
  REQUIRE(f.ok());
  REQUIRE((*f)->append({(*buffer)->data(), kDirectReadAlignment}).ok());
  REQUIRE((*f)->sync().ok());
  REQUIRE((*f)->close().ok());
  CHECK(*fs->file_size(dir / "ckpt/shard") == kDirectReadAlignment);
  CHECK(mode_of(dir / "ckpt/shard") == 0640);
  CHECK_FALSE(fs->open_for_write(dir / "ckpt/shard", {.exclusive = true, .direct = true}).ok());
}

TEST_CASE("rooted fs: a configured group owns what it creates", "[unit]") {
  // Any group this process may give files to: root may use any; others their own.
  const gid_t group = ::geteuid() == 0 ? 100 : ::getegid();
  TempDir dir;
  RootOptions o;
  o.path = dir / "ckpt";
  o.group = group;
  auto fs = RootedFilesystem::single(o);
  REQUIRE(fs->create_dirs(dir / "ckpt/step-1").ok());
  REQUIRE(fs->open_for_write(dir / "ckpt/step-1/shard", {}).ok());
  struct stat st {};
  REQUIRE(::stat((dir / "ckpt/step-1").c_str(), &st) == 0);
  CHECK(st.st_gid == group);
  CHECK((st.st_mode & 07777) == (02000 | 0750));  // set-group-ID: the ranks' files inherit it
  REQUIRE(::stat((dir / "ckpt/step-1/shard").c_str(), &st) == 0);
  CHECK(st.st_gid == group);
  CHECK((st.st_mode & 07777) == 0640);
  // A file another process makes inside inherits the group through set-group-ID.
  spit(dir / "ckpt/step-1/by-rank", "x");
  REQUIRE(::stat((dir / "ckpt/step-1/by-rank").c_str(), &st) == 0);
  CHECK(st.st_gid == group);
}

TEST_CASE("rooted fs: rewriting a file refuses one with other hard links", "[unit]") {
  TempDir dir;
  stdfs::create_directories(dir / "out");
  spit(dir / "victim", "precious");
  REQUIRE(::link((dir / "victim").c_str(), (dir / "out/model.safetensors").c_str()) == 0);
  auto fs = rooted(dir / "out");
  auto f = fs->open_for_write(dir / "out/model.safetensors", {});
  REQUIRE_FALSE(f.ok());
  CHECK_THAT(f.error().message(), Catch::Contains("hard links"));
  CHECK(slurp(dir / "victim") == "precious");
}

TEST_CASE("rooted fs: remove_all never leaves the root through a link", "[unit]") {
  TempDir dir;
  stdfs::create_directories(dir / "ckpt/step/sub");
  stdfs::create_directories(dir / "outside/keep");
  spit(dir / "outside/keep/manifest.json", "theirs");
  stdfs::create_directory_symlink(dir / "outside", dir / "ckpt/step/sub/link");
  stdfs::create_directory_symlink(dir / "outside/keep", dir / "ckpt/step-link");
  spit(dir / "ckpt/step/file", "x");
  auto fs = rooted(dir / "ckpt");
  REQUIRE(fs->remove_all(dir / "ckpt/step").ok());
  CHECK_FALSE(stdfs::exists(dir / "ckpt/step"));
  // remove_all of a link removes the link, not what it points at.
  REQUIRE(fs->remove_all(dir / "ckpt/step-link").ok());
  CHECK_FALSE(stdfs::exists(stdfs::symlink_status(dir / "ckpt/step-link")));
  CHECK(slurp(dir / "outside/keep/manifest.json") == "theirs");
}

namespace {

// A neighbour that swaps the step directory for a link to another directory right after
// the caller has checked what it is (lstat) - the race every check-then-act loses.
class SwapAfterCheck final : public Filesystem {
 public:
  SwapAfterCheck(Filesystem& base, std::string step, std::string target)
      : base_(base), step_(std::move(step)), target_(std::move(target)) {}
  Result<PathKind> path_kind(const std::string& p) override {
    auto kind = base_.path_kind(p);
    if (p == step_ && !swapped_) {
      swapped_ = true;
      stdfs::rename(step_, step_ + ".moved");
      stdfs::create_directory_symlink(target_, step_);
    }
    return kind;
  }
  Result<std::unique_ptr<WritableFile>> open_for_write(const std::string& p,
                                                       OpenOptions o) override {
    return base_.open_for_write(p, o);
  }
  Result<std::unique_ptr<MappedFile>> map_readonly(const std::string& p) override {
    return base_.map_readonly(p);
  }
  Result<std::string> read_file(const std::string& p) override { return base_.read_file(p); }
  Status rename(const std::string& a, const std::string& b) override { return base_.rename(a, b); }
  Status sync_dir(const std::string& d) override { return base_.sync_dir(d); }
  Result<std::vector<DirEntry>> list(const std::string& d) override { return base_.list(d); }
  Status remove(const std::string& p) override { return base_.remove(p); }
  Status remove_all(const std::string& p) override { return base_.remove_all(p); }
  Status create_dirs(const std::string& p) override { return base_.create_dirs(p); }
  Result<uint64_t> file_size(const std::string& p) override { return base_.file_size(p); }
  Result<bool> exists(const std::string& p) override { return base_.exists(p); }
  Result<uint64_t> free_space(const std::string& p) override { return base_.free_space(p); }

 private:
  Filesystem& base_;
  std::string step_, target_;
  bool swapped_ = false;
};

}  // namespace

TEST_CASE("retention through the rooted fs: a step swapped for a link mid-removal", "[unit]") {
  TempDir dir;
  stdfs::create_directories(dir / "ckpt/step-000000005");
  spit(dir / "ckpt/step-000000005/manifest.json", "ours");
  stdfs::create_directories(dir / "victim");
  spit(dir / "victim/manifest.json", "not ours");
  spit(dir / "victim/data", "not ours either");
  auto fs = rooted(dir / "ckpt");
  SwapAfterCheck hostile(*fs, dir / "ckpt/step-000000005", dir / "victim");
  auto st = checkpoint::remove_checkpoint_dir(hostile, dir / "ckpt/step-000000005");
  // The removal stops at the link (or removes the link itself): never what it points at.
  INFO((st.ok() ? std::string("removed") : st.error().message()));
  CHECK(slurp(dir / "victim/manifest.json") == "not ours");
  CHECK(slurp(dir / "victim/data") == "not ours either");
}
