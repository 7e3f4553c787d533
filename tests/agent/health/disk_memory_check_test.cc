// DiskCheck with a filesystem whose free space is scripted, MemoryCheck with fake /proc
// files, and the meminfo / PSI parsers.
#include <catch2/catch.hpp>
#include <map>

#include "agent/health/disk_check.h"
#include "agent/health/memory_check.h"

using namespace shardguard;
using namespace shardguard::agent;

namespace {

constexpr uint64_t kGiB = 1ull << 30;

// Only free_space() and read_file() answer, from the maps; everything else is unsupported.
class ScriptedFs final : public Filesystem {
 public:
  std::map<std::string, Result<uint64_t>> space;
  std::map<std::string, std::string> files;

  Result<uint64_t> free_space(const std::string& path) override {
    auto it = space.find(path);
    if (it == space.end()) return Error(ErrorCode::kNotFound, "statvfs '" + path + "': ENOENT");
    return it->second;
  }
  Result<std::string> read_file(const std::string& path) override {
    auto it = files.find(path);
    if (it == files.end()) return Error(ErrorCode::kNotFound, "open '" + path + "': ENOENT");
    return it->second;
  }
  Result<std::unique_ptr<WritableFile>> open_for_write(const std::string&, OpenOptions) override {
    return no();
  }
  Result<std::unique_ptr<MappedFile>> map_readonly(const std::string&) override { return no(); }
  Status rename(const std::string&, const std::string&) override { return no(); }
  Status sync_dir(const std::string&) override { return no(); }
  Result<std::vector<DirEntry>> list(const std::string&) override { return no(); }
  Status remove(const std::string&) override { return no(); }
  Status remove_all(const std::string&) override { return no(); }
  Status create_dirs(const std::string&) override { return no(); }
  Result<uint64_t> file_size(const std::string&) override { return no(); }
  Result<bool> exists(const std::string&) override { return no(); }

 private:
  static Error no() { return Error(ErrorCode::kUnsupported, "not scripted"); }
};

HealthFinding run(HealthCheck& check) {
  HealthFinding got;
  check.run([&](HealthFinding f) { got = std::move(f); });
  return got;
}

DiskCheckConfig disk_config() {
  DiskCheckConfig c;
  c.path = "/ckpt/job";
  c.fatal_bytes = 1ull << 30;  // a configured hard minimum ([health] disk_fatal)
  return c;                    // warning 10 GiB
}

}  // namespace

TEST_CASE("disk: thresholds") {
  ScriptedFs fs;
  DiskCheck check(disk_config(), fs);
  auto [free, severity] = GENERATE(table<uint64_t, HealthFinding::Severity>({
      {500 * kGiB, HealthFinding::kOk},
      {10 * kGiB, HealthFinding::kOk},
      {10 * kGiB - 1, HealthFinding::kWarning},
      {2 * kGiB, HealthFinding::kWarning},
      {kGiB, HealthFinding::kWarning},
      {kGiB - 1, HealthFinding::kFatal},
      {0, HealthFinding::kFatal},
  }));
  fs.space.insert_or_assign("/ckpt/job", Result<uint64_t>(free));
  HealthFinding got = run(check);
  CAPTURE(free, got.evidence);
  CHECK(got.check == "disk");
  CHECK(got.severity == severity);
  CHECK(got.evidence.rfind("checkpoint dir '/ckpt/job': ", 0) == 0);
}

TEST_CASE("disk: evidence says which limit was crossed") {
  ScriptedFs fs;
  fs.space.insert_or_assign("/ckpt/job", Result<uint64_t>(512ull << 20));
  DiskCheck check(disk_config(), fs);
  CHECK(run(check).evidence ==
        "checkpoint dir '/ckpt/job': 512.00 MiB free, below the hard minimum 1.00 GiB");
}

TEST_CASE("disk: less than headroom x the checkpoint size is a warning") {
  ScriptedFs fs;
  fs.space.insert_or_assign("/ckpt/job", Result<uint64_t>(100 * kGiB));
  DiskCheckConfig c = disk_config();
  c.checkpoint_size = 40 * kGiB;
  DiskCheck check(c, fs);
  CHECK(run(check).severity == HealthFinding::kOk);
  check.set_checkpoint_size(60 * kGiB);
  HealthFinding got = run(check);
  CHECK(got.severity == HealthFinding::kWarning);
  CHECK(got.evidence.find("below 120.00 GiB (checkpoints of about 60.00 GiB)") !=
        std::string::npos);
}

TEST_CASE("disk: a directory not created yet is measured at its nearest ancestor") {
  ScriptedFs fs;
  fs.space.insert_or_assign("/ckpt", Result<uint64_t>(kGiB / 2));
  DiskCheck check(disk_config(), fs);
  CHECK(run(check).severity == HealthFinding::kFatal);
}

TEST_CASE("disk: statvfs failing is a warning; no directory is 'not available'") {
  ScriptedFs fs;
  fs.space.insert_or_assign("/ckpt/job", Result<uint64_t>(Error::from_errno("statvfs", EIO)));
  DiskCheck check(disk_config(), fs);
  HealthFinding got = run(check);
  CHECK(got.severity == HealthFinding::kWarning);
  CHECK(got.evidence.find("Input/output error") != std::string::npos);
  DiskCheck none(DiskCheckConfig{}, fs);
  CHECK(run(none).not_available);
}

TEST_CASE("disk: the real filesystem") {
  DiskCheckConfig c;
  c.path = "/tmp";
  c.warning_bytes = c.fatal_bytes = 0;
  DiskCheck check(c, PosixFilesystem::instance());
  HealthFinding got = run(check);
  CHECK(got.severity == HealthFinding::kOk);
  CHECK(got.evidence.find(" free") != std::string::npos);
}

namespace {

constexpr const char* kMeminfo =
    "MemTotal:       16000000 kB\n"
    "MemFree:          500000 kB\n"
    "MemAvailable:    4000000 kB\n"
    "Buffers:          100000 kB\n"
    "Cached:          2000000 kB\n"
    "HugePages_Total:       0\n";

}  // namespace

TEST_CASE("meminfo: MemTotal and MemAvailable") {
  auto info = parse_meminfo(kMeminfo);
  REQUIRE(info.ok());
  CHECK(info->total_kib == 16000000);
  CHECK(info->available_kib == 4000000);
}

TEST_CASE("meminfo: without MemAvailable (old kernels) free + buffers + cached") {
  auto info = parse_meminfo("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 10 kB\nCached: 1 kB\n");
  REQUIRE(info.ok());
  CHECK(info->available_kib == 111);
}

TEST_CASE("meminfo: bad input") {
  CHECK_FALSE(parse_meminfo("").ok());
  CHECK_FALSE(parse_meminfo("MemFree: 1 kB\n").ok());
  CHECK_FALSE(parse_meminfo("MemTotal: lots kB\n").ok());
}

TEST_CASE("psi: some and full lines") {
  auto psi = parse_psi(
      "some avg10=12.50 avg60=3.00 avg300=0.75 total=123456\n"
      "full avg10=1.00 avg60=0.50 avg300=0.00 total=999\n");
  REQUIRE(psi.ok());
  CHECK(psi->some.avg10 == Approx(12.5));
  CHECK(psi->some.avg300 == Approx(0.75));
  CHECK(psi->some.total_us == 123456);
  REQUIRE(psi->full);
  CHECK(psi->full->avg60 == Approx(0.5));
  auto only_some = parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
  REQUIRE(only_some.ok());
  CHECK_FALSE(only_some->full);
  CHECK_FALSE(parse_psi("").ok());
  CHECK_FALSE(parse_psi("some avg10=high\n").ok());
}

namespace {

struct MemoryFixture {
  ScriptedFs fs;
  MemoryCheckConfig config;
  MemoryFixture() {
    config.meminfo_path = "/fake/meminfo";
    config.psi_path = "/fake/pressure";
    fs.files["/fake/meminfo"] = kMeminfo;  // 25% available
    fs.files["/fake/pressure"] = "some avg10=1.00 avg60=0 avg300=0 total=0\n";
  }
  HealthFinding run() {
    MemoryCheck check(config, fs);
    return ::run(check);
  }
};

}  // namespace

TEST_CASE("memory: enough available and little pressure is ok") {
  MemoryFixture f;
  HealthFinding got = f.run();
  CHECK(got.check == "memory");
  CHECK(got.severity == HealthFinding::kOk);
  CHECK(got.evidence == "3.81 GiB of 15.26 GiB available");
}

TEST_CASE("memory: little available is a warning") {
  MemoryFixture f;
  f.config.min_available_fraction = 0.30;
  HealthFinding got = f.run();
  CHECK(got.severity == HealthFinding::kWarning);
  CHECK(got.evidence.find("(below 30.00%)") != std::string::npos);
}

TEST_CASE("memory: PSI above the threshold is a warning; a missing PSI file is ignored") {
  MemoryFixture f;
  f.fs.files["/fake/pressure"] = "some avg10=40.00 avg60=10 avg300=1 total=5\n";
  HealthFinding got = f.run();
  CHECK(got.severity == HealthFinding::kWarning);
  CHECK(got.evidence == "memory pressure: some avg10=40.00% (above 25.00%)");
  f.config.max_psi_some_avg10 = 0;  // off
  CHECK(f.run().severity == HealthFinding::kOk);
  f.config.max_psi_some_avg10 = 25;
  f.fs.files.erase("/fake/pressure");
  CHECK(f.run().severity == HealthFinding::kOk);
}

TEST_CASE("memory: without meminfo the check is 'not available'") {
  MemoryFixture f;
  f.fs.files.erase("/fake/meminfo");
  CHECK(f.run().not_available);
}

TEST_CASE("memory: the real /proc") {
  MemoryCheck check(MemoryCheckConfig{}, PosixFilesystem::instance());
  HealthFinding got = run(check);
  CAPTURE(got.evidence);
  CHECK_FALSE(got.not_available);
}

TEST_CASE("disk: by default nothing is fatal, not even less than one checkpoint") {
  ScriptedFs fs;
  DiskCheckConfig c;
  c.path = "/ckpt/job";
  // A small volume on a first run (checkpoint size unknown): a warning, never an exit that
  // every requeue would repeat.
  fs.space.insert_or_assign("/ckpt/job", Result<uint64_t>(512ull << 20));
  DiskCheck check(c, fs);
  CHECK(run(check).severity == HealthFinding::kWarning);
  // Checkpoints of 300 MiB fit: still only the warning level.
  check.set_checkpoint_size(300ull << 20);
  CHECK(run(check).severity == HealthFinding::kWarning);
  // Checkpoints of 600 MiB do not, unless retention frees room: the run's supervisor decides
  // that (it frees room, or stops with 78 when it never can), so this is a warning too.
  check.set_checkpoint_size(600ull << 20);
  HealthFinding got = run(check);
  CHECK(got.severity == HealthFinding::kWarning);
  CHECK(got.evidence ==
        "checkpoint dir '/ckpt/job': 512.00 MiB free, less than one checkpoint (about 600.00 "
        "MiB): the next one fits only if retention frees room");
}
