// Tests for Filesystem::open_for_read (core/filesystem.h): positional reads through pread,
// with and without O_DIRECT, the mapping-based default of the base class, page-cache
// residency of a mapping, and read faults of FaultInjectingFilesystem.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/fault_fs.h"
#include "tests/support/temp_dir.h"

using namespace shardguard;
using shardguard::testing::spit;
using shardguard::testing::TempDir;

namespace {

// 3 pages and a bit: the end is not aligned.
std::string pattern(size_t n = 3 * 4096 + 123) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 4096) % 26);
  return s;
}

std::string as_string(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// A Filesystem that forwards everything except open_for_read, so the base class's default
// (reads served from map_readonly) is what runs.
class MappingOnlyFilesystem final : public Filesystem {
 public:
  Result<std::unique_ptr<WritableFile>> open_for_write(const std::string& p,
                                                       OpenOptions o) override {
    return base().open_for_write(p, o);
  }
  Result<std::unique_ptr<MappedFile>> map_readonly(const std::string& p) override {
    return base().map_readonly(p);
  }
  Result<std::string> read_file(const std::string& p) override { return base().read_file(p); }
  Status rename(const std::string& a, const std::string& b) override { return base().rename(a, b); }
  Status sync_dir(const std::string& d) override { return base().sync_dir(d); }
  Result<std::vector<DirEntry>> list(const std::string& d) override { return base().list(d); }
  Status remove(const std::string& p) override { return base().remove(p); }
  Status remove_all(const std::string& p) override { return base().remove_all(p); }
  Status create_dirs(const std::string& p) override { return base().create_dirs(p); }
  Result<uint64_t> file_size(const std::string& p) override { return base().file_size(p); }
  Result<bool> exists(const std::string& p) override { return base().exists(p); }
  Result<uint64_t> free_space(const std::string& p) override { return base().free_space(p); }

 private:
  static Filesystem& base() { return PosixFilesystem::instance(); }
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// `n` bytes at a 4 KiB boundary, as O_DIRECT needs.
std::unique_ptr<std::byte, FreeDeleter> aligned_bytes(size_t n) {
  void* p = nullptr;
  REQUIRE(::posix_memalign(&p, 4096, n) == 0);
  return std::unique_ptr<std::byte, FreeDeleter>(static_cast<std::byte*>(p));
}

}  // namespace

TEST_CASE("open_for_read reads any range, short only at the end of the file", "[core][read]") {
  TempDir dir;
  const std::string path = dir / "data";
  const std::string data = pattern();
  spit(path, data);
  MappingOnlyFilesystem mapping_fs;
  const bool posix = GENERATE(true, false);
  Filesystem& fs = posix ? static_cast<Filesystem&>(PosixFilesystem::instance())
                         : static_cast<Filesystem&>(mapping_fs);
  INFO((posix ? "PosixFilesystem" : "the default open_for_read"));
  auto file = fs.open_for_read(path);
  REQUIRE(file.ok());
  CHECK((*file)->size() == data.size());
  CHECK((*file)->path() == path);
  CHECK_FALSE((*file)->direct());

  std::vector<std::byte> buf(5000);
  for (uint64_t offset : {uint64_t{0}, uint64_t{1}, uint64_t{4095}, uint64_t{4096},
                          uint64_t{7000}}) {
    INFO("offset " << offset);
    REQUIRE((*file)->read_exact(offset, buf).ok());
    CHECK(as_string(buf) == data.substr(offset, buf.size()));
  }
  // Across the end: read_at is short, read_exact fails naming the file.
  const uint64_t near_end = data.size() - 100;
  auto n = (*file)->read_at(near_end, buf);
  REQUIRE(n.ok());
  CHECK(*n == 100);
  CHECK(as_string(std::span(buf).first(100)) == data.substr(near_end));
  auto st = (*file)->read_exact(near_end, buf);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code() == ErrorCode::kIo);
  CHECK_THAT(st.error().message(), Catch::Contains(path));
  auto past = (*file)->read_at(data.size() + 10, buf);
  REQUIRE(past.ok());
  CHECK(*past == 0);
}

TEST_CASE("open_for_read with direct reads aligned blocks and the unaligned end",
          "[core][read]") {
  TempDir dir;
  const std::string path = dir / "data";
  const std::string data = pattern();
  spit(path, data);
  auto file = PosixFilesystem::instance().open_for_read(path, {.direct = true});
  REQUIRE(file.ok());
  // tmpfs refuses O_DIRECT: the file then reads through the page cache, which also works.
  INFO("direct " << (*file)->direct());
  auto buf = aligned_bytes(4 * 4096);
  auto n = (*file)->read_at(4096, {buf.get(), 4 * 4096});  // runs past the end of the file
  REQUIRE(n.ok());
  CHECK(*n == data.size() - 4096);
  CHECK(as_string({buf.get(), *n}) == data.substr(4096));
  REQUIRE((*file)->read_exact(0, {buf.get(), 2 * 4096}).ok());
  CHECK(as_string({buf.get(), 2 * 4096}) == data.substr(0, 2 * 4096));
}

TEST_CASE("open_for_read of a missing file is kNotFound", "[core][read]") {
  TempDir dir;
  auto file = PosixFilesystem::instance().open_for_read(dir / "missing", {});
  REQUIRE_FALSE(file.ok());
  CHECK(file.error().code() == ErrorCode::kNotFound);
}

TEST_CASE("A mapping tells how much of a range is in the page cache", "[core][read]") {
  TempDir dir;
  const std::string path = dir / "data";
  const std::string data = pattern();
  spit(path, data);
  (void)PosixFilesystem::instance().read_file(path);  // just written and read: cached
  auto mapped = PosixFilesystem::instance().map_readonly(path);
  REQUIRE(mapped.ok());
  auto all = (*mapped)->resident_bytes(0, data.size());
  REQUIRE(all.has_value());
  CHECK(*all <= data.size());
  CHECK(*all == data.size());  // the file was just read, nothing should have evicted it
  auto part = (*mapped)->resident_bytes(100, 5000);
  REQUIRE(part.has_value());
  CHECK(*part == 5000);
  // Clipped at the end of the file.
  CHECK((*mapped)->resident_bytes(data.size() - 10, 1000).value_or(0) == 10);
  CHECK((*mapped)->resident_bytes(data.size() + 10, 1000).value_or(1) == 0);

  // Evicted, the count drops (eviction is best effort: only check it is not more).
  int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  auto after = (*mapped)->resident_bytes(0, data.size());
  REQUIRE(after.has_value());
  CHECK(*after <= data.size());
}

TEST_CASE("Read faults fail reads without shifting the mutating operation count",
          "[core][fault][read]") {
  TempDir dir;
  const std::string path = dir / "data";
  const std::string data = pattern();
  spit(path, data);
  FaultInjectingFilesystem fs(PosixFilesystem::instance());
  std::vector<std::byte> buf(100);

  fs.fail_nth_read(2, EIO);
  auto file = fs.open_for_read(path, {});  // read operation 1
  REQUIRE(file.ok());
  auto st = (*file)->read_exact(10, buf);  // read operation 2: fails
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code() == ErrorCode::kIo);
  CHECK_THAT(st.error().message(), Catch::Contains(path) && Catch::Contains("(injected)"));
  REQUIRE((*file)->read_exact(10, buf).ok());  // not sticky
  CHECK(as_string(buf) == data.substr(10, 100));
  CHECK(fs.read_operations() == 3);
  CHECK(fs.operations() == 0);

  fs.fail_nth_read(1, EIO, /*sticky=*/true);
  CHECK_FALSE(fs.map_readonly(path).ok());
  CHECK_FALSE(fs.read_file(path).ok());
  CHECK_FALSE(fs.open_for_read(path, {}).ok());
  CHECK_FALSE((*file)->read_exact(0, buf).ok());
  // Mutating faults are armed and counted apart.
  fs.fail_nth_operation(1, ENOSPC);
  CHECK_FALSE(fs.create_dirs(dir / "sub").ok());
  CHECK(fs.operations() == 1);
  fs.clear_faults();
  CHECK(fs.map_readonly(path).ok());
  CHECK(fs.read_file(path).value_or("") == data);
  auto direct = fs.open_for_read(path, {.direct = true});
  REQUIRE(direct.ok());
  auto block = aligned_bytes(4096);
  REQUIRE((*direct)->read_exact(4096, {block.get(), 4096}).ok());
  CHECK(as_string({block.get(), 4096}) == data.substr(4096, 4096));
}

TEST_CASE("Direct I/O buffers are 2 MiB aligned and writable", "[core][read]") {
  auto buffer = DirectIoBuffer::allocate(3 * 4096 + 5);
  REQUIRE(buffer.ok());
  CHECK(reinterpret_cast<uintptr_t>((*buffer)->data()) % DirectIoBuffer::kHugePage == 0);
  CHECK((*buffer)->size() == 3 * 4096 + 5);
  CHECK((*buffer)->data()[0] == std::byte{0});  // zeroed when faulted in
  std::memset((*buffer)->data(), 7, (*buffer)->size());
  CHECK((*buffer)->data()[(*buffer)->size() - 1] == std::byte{7});
}
