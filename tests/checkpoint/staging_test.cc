// Staging memory of async saves (checkpoint/staging.h): sized from the resume manifest,
// mapped 2 MiB-aligned with huge pages advised, populated in the background (checked with
// mincore: the pages are really there before anyone writes them), kept across reserve()s,
// handed to the release hook before it goes; and ShardWriter::place(): tensors whose bytes
// the caller copies into staging itself (the GPU path) end up in a file every reader checks.
#include "checkpoint/staging.h"

#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <numeric>
#include <sstream>
#include <thread>
#include <vector>

#include "checkpoint/commit.h"
#include "checkpoint/reader.h"
#include "checkpoint/writer.h"
#include "core/clock.h"
#include "core/filesystem.h"
#include "tests/support/temp_dir.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::checkpoint;
using shardguard::testing::TempDir;

namespace {

Manifest manifest_of(uint32_t world, std::vector<uint64_t> sizes) {
  Manifest m;
  m.world_size = world;
  for (uint32_t r = 0; r < sizes.size(); ++r) {
    FileRecord f;
    f.path = "shard-" + std::to_string(r);
    f.size = sizes[r];
    f.rank = r;
    m.files.push_back(f);
  }
  return m;
}

// Pages of [p, p + n) the kernel has in memory.
size_t resident_pages(const std::byte* p, size_t n) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((n + page - 1) / page);
  if (::mincore(const_cast<std::byte*>(p), n, vec.data()) != 0) return 0;
  return static_cast<size_t>(
      std::count_if(vec.begin(), vec.end(), [](unsigned char c) { return c & 1; }));
}

// Waits (bounded: 20 s) until the background population is over.
bool population_ends(const StagingBuffer& s) {
  for (auto until = std::chrono::steady_clock::now() + 20s;
       std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(5ms))
    if (!s.stats().populating) return true;
  return false;
}

std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// AnonHugePages (kB) of the mapping that starts at `p`, from /proc/self/smaps.
uint64_t anon_huge_kb(const void* p) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  char start[32];
  std::snprintf(start, sizeof start, "%lx-", reinterpret_cast<unsigned long>(p));
  while (std::getline(in, line)) {
    if (line.find('-') != std::string::npos && line.find(':') > line.find(' ')) {
      inside = line.rfind(start, 0) == 0;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) return std::stoull(line.substr(14));
  }
  return 0;
}

}  // namespace

TEST_CASE("staging: sized from this rank's file of the resume manifest", "[unit]") {
  SECTION("same world size: this rank's own file") {
    const Manifest m = manifest_of(3, {100, 250, 90});
    CHECK(staging_bytes_for(m, 0, 3) == 100);
    CHECK(staging_bytes_for(m, 1, 3) == 250);
    CHECK(staging_bytes_for(m, 2, 3) == 90);
  }
  SECTION("another world size: the largest file, scaled and rounded up") {
    const Manifest m = manifest_of(2, {1000, 1001});
    CHECK(staging_bytes_for(m, 0, 4) == 501);   // ceil(1001 * 2 / 4)
    CHECK(staging_bytes_for(m, 0, 1) == 2002);  // both shards' bytes on one rank
    CHECK(staging_bytes_for(m, 2, 3) == 668);   // ceil(2002 / 3)
  }
  SECTION("nothing to go by") {
    CHECK(staging_bytes_for(manifest_of(2, {10}), 1, 2) == 0);  // rank 1 wrote no file
    CHECK(staging_bytes_for(Manifest{}, 0, 1) == 0);
    CHECK(staging_bytes_for(manifest_of(1, {10}), 0, 0) == 0);
  }
}

TEST_CASE("staging: prepare() maps 2 MiB-aligned memory and populates it in the background",
          "[unit]") {
  StagingBuffer s;
  constexpr size_t kSize = 96ull << 20;
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(s.prepare(kSize - 5).ok());
  // prepare() maps and returns; the population runs on other threads.
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  REQUIRE(s.data() != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(s.data()) % kStagingHugePage == 0);
  CHECK(s.capacity() == kSize);
  REQUIRE(population_ends(s));
  const StagingStats st = s.stats();
  CHECK(st.populated_bytes == kSize);
  CHECK(st.populate_seconds > 0);
  // Populated for real: every page is in memory before anyone wrote to it.
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  CHECK(resident_pages(s.data(), kSize) == kSize / page);
  const std::string mode = thp_mode();
  if (mode.find("[never]") == std::string::npos && !mode.empty()) {
    CHECK(st.huge_pages_advised);
    // Huge pages are best effort (memory may be fragmented): said, not required.
    if (anon_huge_kb(s.data()) == 0) WARN("the staging mapping got no transparent huge page");
  }

  SECTION("a smaller or equal prepare() keeps the mapping") {
    std::byte* before = s.data();
    REQUIRE(s.prepare(1 << 20).ok());
    CHECK(s.data() == before);
    CHECK(s.capacity() == kSize);
  }
  SECTION("reserve() within the capacity hands out the same memory") {
    std::byte* before = s.data();
    auto got = s.reserve(kSize);
    REQUIRE(got.ok());
    CHECK(*got == before);
    std::memset(*got, 0x5a, kSize);  // writable, all of it
    CHECK(s.data()[kSize - 1] == std::byte{0x5a});
  }
}

TEST_CASE("staging: reserve() stops a population still running and keeps the memory", "[unit]") {
  StagingOptions o;
  o.populate_threads = 1;
  StagingBuffer s(o);
  constexpr size_t kSize = 512ull << 20;
  REQUIRE(s.prepare(kSize).ok());
  std::byte* mapped = s.data();
  auto got = s.reserve(kSize);  // at once, before the population can be done
  REQUIRE(got.ok());
  CHECK(*got == mapped);
  const StagingStats st = s.stats();
  CHECK_FALSE(st.populating);  // stopped, not running beside the caller's copy
  CHECK(st.populated_bytes <= kSize);
  // Whatever the population did not reach, the caller's writes fault in.
  std::memset(*got, 1, kSize);
  CHECK(resident_pages(*got, kSize) == kSize / static_cast<size_t>(::sysconf(_SC_PAGESIZE)));
}

TEST_CASE("staging: the release hook sees each mapping before it is unmapped", "[unit]") {
  std::vector<std::pair<std::byte*, size_t>> released;
  {
    StagingBuffer s;
    s.set_release_hook([&](std::byte* p, size_t n) { released.emplace_back(p, n); });
    REQUIRE(s.prepare(4 << 20).ok());
    std::byte* first = s.data();
    auto bigger = s.reserve(10 << 20);  // larger than the capacity: a new mapping
    REQUIRE(bigger.ok());
    REQUIRE(released.size() == 1);
    CHECK(released[0] == std::pair{first, size_t{4 << 20}});
    CHECK(s.capacity() == (10u << 20));
    CHECK(s.stats().populated_bytes == 0);  // a mapping made by reserve() is the caller's
  }
  REQUIRE(released.size() == 2);
  CHECK(released[1].second == (10u << 20));
}

TEST_CASE("writer: placeholders are placed in staging, filled by the caller, and written",
          "[unit]") {
  TempDir dir;
  auto& fs = PosixFilesystem::instance();
  WriterOptions o;
  o.checkpoint_dir = dir.path();
  o.job_id = "place";
  o.step = 7;
  o.checksum_block_bytes = 4096;  // several blocks per tensor: the reader checks each
  std::vector<float> host(3000);
  std::iota(host.begin(), host.end(), 0.5f);
  std::vector<int32_t> device(5000);  // stands in for GPU memory
  std::iota(device.begin(), device.end(), -7);

  auto make = [&] {
    ShardWriter w(fs, o);
    REQUIRE(w.add_tensor("host", DType::kF32, {3000}, std::as_bytes(std::span(host))).ok());
    REQUIRE(w.add_placeholder("dev", DType::kI32, {2, 2500}, Box{{0, 0}, {2, 2500}}).ok());
    w.set_global_state({7, "null", "null"});
    return w;
  };

  SECTION("place, fill, finish, read back through the checksummed reader") {
    StagingBuffer staging;
    ShardWriter w = make();
    auto slots = w.place(staging);
    REQUIRE(slots.ok());
    REQUIRE(slots->size() == 1);
    REQUIRE((*slots)[0].size() == device.size() * sizeof(int32_t));
    CHECK((*slots)[0].data() >= staging.data());
    std::memcpy((*slots)[0].data(), device.data(), (*slots)[0].size());
    host.assign(host.size(), -1.0f);  // the host tensor was copied by place()
    auto copied = w.snapshot(staging);
    REQUIRE(copied.ok());
    CHECK(*copied == 0);  // already in this staging: nothing copied twice
    REQUIRE(w.finish().ok());
    CommitOptions c;
    c.checkpoint_dir = dir.path();
    c.job_id = "place";
    c.step = 7;
    c.world_size = 1;
    REQUIRE(commit_checkpoint(fs, RealClock::instance(), c).ok());
    auto r = CheckpointReader::open(fs, dir.path() + "/step-000000007");
    REQUIRE(r.ok());
    std::vector<int32_t> back(5000);
    REQUIRE(r->read("dev", Box{{0, 0}, {2, 2500}}, std::as_writable_bytes(std::span(back))).ok());
    CHECK(back == device);
    std::vector<float> h(3000);
    REQUIRE(r->read("host", Box{{0}, {3000}}, std::as_writable_bytes(std::span(h))).ok());
    CHECK(h[0] == 0.5f);
    CHECK(h[2999] == 2999.5f);
  }
  SECTION("a placeholder never placed fails the save instead of writing garbage") {
    ShardWriter w = make();
    auto done = w.finish();
    REQUIRE_FALSE(done.ok());
    CHECK(done.error().code() == ErrorCode::kInvalid);
    CHECK_THAT(done.error().message(), Catch::Contains("placeholder"));
    StagingBuffer staging;
    auto snap = make().snapshot(staging);
    REQUIRE_FALSE(snap.ok());
    CHECK(snap.error().code() == ErrorCode::kInvalid);
  }
  SECTION("placeholders filled in one staging are not re-staged into another") {
    StagingBuffer a, b;
    ShardWriter w = make();
    REQUIRE(w.place(a).ok());
    auto again = w.snapshot(b);
    REQUIRE_FALSE(again.ok());  // placeholders are filled only in `a`: refused
  }
}
