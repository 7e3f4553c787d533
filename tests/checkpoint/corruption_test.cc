// Silent corruption (issue 17): one flipped byte anywhere in a format-2 shard fails exactly
// the reads that touch its block, naming the file and the block's offset, on every read
// path (pread, O_DIRECT, the mapping, resharded box assembly, whole-tensor hashes); reads
// that do not touch it succeed bit for bit. The regression: a flipped byte in the newest
// shard used to load silently.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/commit.h"
#include "checkpoint/reader.h"
#include "checkpoint/writer.h"
#include "core/clock.h"
#include "tests/checkpoint/step_fixture.h"
#include "tests/checkpoint/tensor_fixtures.h"
#include "tests/support/temp_dir.h"

namespace shardguard::checkpoint {
namespace {

using testing::Bytes;
using testing::extract_naive;

Filesystem& fs() { return PosixFilesystem::instance(); }

void evict(const std::string& dir) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    int fd = ::open(e.path().c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

void flip_byte(const std::string& path, uint64_t offset) {
  Bytes b = testing::read_bytes(path);
  REQUIRE(offset < b.size());
  b[offset] ^= std::byte{0x20};
  testing::write_bytes(path, b);
}

std::string error_of(const Status& st) { return st.ok() ? "ok" : st.error().message(); }

constexpr uint64_t kBlock = 64 << 10;  // small blocks: many of them in a small shard
constexpr uint64_t kRows = 300, kCols = 1024;
const std::string kShard1 = "shard-00001-of-00002.safetensors";

// Two ranks write F32 "w" [300, 1024] split at row 150 (600 KiB each, ten 64 KiB blocks, the
// last one partial) and rank 1 also a whole F32 "bias" [1000], with the real writer; the
// step is committed.
struct TwoRankStep {
  shardguard::testing::TempDir dir;
  Bytes w;     // reference contents of "w"
  Bytes bias;  // and of "bias"
  std::string step_dir = dir / "step-000000007";
  std::string shard1 = step_dir + "/" + kShard1;

  TwoRankStep() {
    testing::Rng rng(17);
    w = testing::random_bytes(kRows * kCols * 4, rng);
    bias = testing::random_bytes(4000, rng);
    const Box whole{{0, 0}, {kRows, kCols}};
    for (uint32_t rank = 0; rank < 2; ++rank) {
      WriterOptions o;
      o.checkpoint_dir = dir.path();
      o.step = 7;
      o.rank = rank;
      o.world_size = 2;
      o.checksum_block_bytes = kBlock;
      ShardWriter writer(fs(), o);
      const Box box{{rank * 150ull, 0}, {150, kCols}};
      const Bytes part = extract_naive(w, whole, box, 4);
      REQUIRE(writer.add_chunk("w", DType::kF32, {kRows, kCols}, box, part).ok());
      if (rank == 1) REQUIRE(writer.add_tensor("bias", DType::kF32, {1000}, bias).ok());
      if (rank == 0) writer.set_global_state({7, "null", "null"});
      auto sidecar = writer.finish();
      REQUIRE(sidecar.ok());
    }
    CommitOptions c;
    c.checkpoint_dir = dir.path();
    c.step = 7;
    c.world_size = 2;
    FakeClock clock;
    REQUIRE(try_commit_checkpoint(fs(), clock, c).ok());
  }

  Box rows(uint64_t first, uint64_t end) const { return Box{{first, 0}, {end - first, kCols}}; }
  Bytes want(const Box& box) const { return extract_naive(w, Box{{0, 0}, {kRows, kCols}}, box, 4); }
  // File offset of element (row, 0) of "w" in rank 1's shard (rows 150..299).
  uint64_t offset_of_row(const CheckpointReader& reader, uint64_t row) const {
    const FileRecord* f = reader.manifest().find_file(kShard1);
    REQUIRE(f != nullptr);
    // The data ends the file; "w@150,0" is its last tensor, 150 rows long.
    return f->size - (300 - row) * kCols * 4;
  }
};

TEST_CASE("one flipped byte fails the reads touching its block, naming file and offset",
          "[reader][corruption]") {
  TwoRankStep fx;
  const uint64_t size = std::filesystem::file_size(fx.shard1);
  REQUIRE(size % kBlock != 0);  // the last block is partial
  struct Where {
    const char* what;
    uint64_t offset;
  };
  const Where where = GENERATE_COPY(Where{"header", 100}, Where{"first block's data", 4096 + 40},
                                    Where{"a middle block", 5 * kBlock + 123},
                                    Where{"last partial block", size - 1});
  const uint64_t block = where.offset / kBlock * kBlock;
  const bool in_block0 = block == 0;
  flip_byte(fx.shard1, where.offset);
  const bool cold = GENERATE(true, false);
  const bool direct = GENERATE(true, false);
  // Long runs by pread/O_DIRECT in small requests, or everything through the mapping.
  const size_t min_pread = GENERATE(size_t{1}, size_t{1} << 30);
  if (cold) evict(fx.step_dir);
  ReaderOptions options{.io_threads = 3,
                        .request_bytes = 3 * 4096,
                        .min_pread_bytes = min_pread,
                        .direct_io = direct};
  auto reader = CheckpointReader::open(fs(), fx.step_dir, options);
  REQUIRE(reader.ok());
  INFO(where.what << " at " << where.offset << ", cold " << cold << ", direct " << direct
                  << ", min_pread " << min_pread);
  const std::string expected = "step-000000007/" + kShard1 + ": block at offset " +
                               std::to_string(block) + " (64 KiB) fails its checksum";
  const ChecksumFailure expected_failure{fx.step_dir + "/manifest.json", kShard1, block, kBlock};

  // A box of rank 1's rows that holds the flipped byte (any row for block 0: the header).
  const uint64_t bad_row =
      in_block0 ? 150 : 150 + (where.offset - fx.offset_of_row(*reader, 150)) / (kCols * 4);
  SECTION("a row read that touches it fails; reads beside it succeed") {
    Bytes out(kCols * 4);
    auto st = reader->read("w", fx.rows(bad_row, bad_row + 1), out);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code() == ErrorCode::kCorrupt);
    CHECK_THAT(st.error().message(), Catch::EndsWith(expected));
    CHECK_THAT(st.error().message(), Catch::StartsWith("tensor 'w': "));
    CHECK(reader->checksum_failure() == expected_failure);
    // The verdict stays: the same read fails the same way without looking again.
    CHECK(error_of(reader->read("w", fx.rows(bad_row, bad_row + 1), out)) == st.error().message());
    // Rank 0's rows are in the other file.
    Bytes first(150 * kCols * 4);
    CHECK(error_of(reader->read("w", fx.rows(0, 150), first)) == "ok");
    CHECK(first == fx.want(fx.rows(0, 150)));
    if (in_block0) {
      // Block 0 holds the header every read of the file relies on.
      CHECK_FALSE(reader->read("w", fx.rows(299, 300), out).ok());
      CHECK_FALSE(reader->read_whole("bias").ok());
    } else {
      // Rows of rank 1 whose blocks are intact.
      const uint64_t other = bad_row < 225 ? 299 : 151;
      REQUIRE(error_of(reader->read("w", fx.rows(other, other + 1), out)) == "ok");
      CHECK(out == fx.want(fx.rows(other, other + 1)));
      CHECK(reader->read_whole("bias").value_or(Bytes{}) == fx.bias);
      CHECK(reader->tensor_xxh3_64("bias").ok());
    }
  }
  SECTION("resharded reads across both chunks fail when they touch it") {
    // Rows spanning the chunk boundary at 150, a column slice (short runs from every row:
    // box assembly through the mapping), and the whole tensor.
    for (const Box& box :
         {fx.rows(100, bad_row + 1), Box{{0, 100}, {kRows, 7}}, Box{{0, 0}, {kRows, kCols}}}) {
      INFO("box " << box.to_string());
      Bytes out(box.volume() * 4);
      auto st = reader->read("w", box, out);
      REQUIRE_FALSE(st.ok());
      CHECK_THAT(st.error().message(), Catch::EndsWith(expected));
    }
    CHECK(reader->checksum_failure() == expected_failure);
    CHECK_FALSE(reader->tensor_xxh3_64("w", 1 << 20).ok());
    // A resharded read that stays in good blocks of both files succeeds.
    if (!in_block0) {
      const Box box = bad_row < 225 ? fx.rows(100, 151) : fx.rows(140, 225);
      Bytes out(box.volume() * 4);
      CHECK(error_of(reader->read("w", box, out)) == "ok");
      CHECK(out == fx.want(box));
    }
  }
}

// Rank-0-only "w" [300, 1024] F32 with its data at file offset 4096: a 4 KiB aligned buffer
// of rows is aligned like the file, so whole blocks take the pread path, hashed as they land.
TEST_CASE("whole blocks read by pread into aligned memory are checked as they land",
          "[reader][corruption]") {
  shardguard::testing::TempDir dir;
  testing::Rng rng(23);
  const Bytes w = testing::random_bytes(kRows * kCols * 4, rng);
  WriterOptions o;
  o.checkpoint_dir = dir.path();
  o.step = 1;
  o.checksum_block_bytes = kBlock;
  ShardWriter writer(fs(), o);
  REQUIRE(writer.add_tensor("w", DType::kF32, {kRows, kCols}, w).ok());
  writer.set_global_state({1, "null", "null"});
  REQUIRE(writer.finish().ok());
  CommitOptions c;
  c.checkpoint_dir = dir.path();
  c.step = 1;
  FakeClock clock;
  REQUIRE(try_commit_checkpoint(fs(), clock, c).ok());
  const std::string step_dir = dir / "step-000000001";
  const std::string shard = step_dir + "/shard-00000-of-00001.safetensors";
  const uint64_t bad = 5 * kBlock + 77;
  flip_byte(shard, bad);

  const size_t shift = GENERATE(size_t{0}, size_t{8});  // aligned like the file, or not
  const bool cold = GENERATE(false, true);
  if (cold) evict(step_dir);
  auto reader = CheckpointReader::open(
      fs(), step_dir, ReaderOptions{.request_bytes = 3 * 4096, .direct_io = false});
  REQUIRE(reader.ok());
  INFO("shift " << shift << " cold " << cold);
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  const size_t all = kRows * kCols * 4;
  std::unique_ptr<std::byte, Free> mem(
      static_cast<std::byte*>(std::aligned_alloc(4096, all + 4096)));
  std::span<std::byte> out(mem.get() + shift, all);
  // File offset 4096 + i holds byte i of "w"; rows 0-70 end before the bad block (5 * 64 KiB).
  const Box good{{0, 0}, {70, kCols}};
  REQUIRE(error_of(reader->read("w", good, out.first(good.volume() * 4))) == "ok");
  CHECK(Bytes(out.begin(), out.begin() + good.volume() * 4) ==
        extract_naive(w, Box{{0, 0}, {kRows, kCols}}, good, 4));
  auto st = reader->read("w", Box{{0, 0}, {kRows, kCols}}, out);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(
      st.error().message(),
      Catch::EndsWith("step-000000001/shard-00000-of-00001.safetensors: block at offset " +
                      std::to_string(bad / kBlock * kBlock) + " (64 KiB) fails its checksum"));
}

TEST_CASE("a header longer than a block is checked block by block before it is parsed",
          "[reader][corruption]") {
  shardguard::testing::TempDir dir;
  WriterOptions o;
  o.checkpoint_dir = dir.path();
  o.step = 2;
  o.checksum_block_bytes = 4096;
  ShardWriter writer(fs(), o);
  const Bytes value(8, std::byte{3});
  // 600 tensors with long names: a header of about 60 KiB, fifteen 4 KiB blocks.
  for (int i = 0; i < 600; ++i)
    REQUIRE(writer
                .add_tensor("a.rather.long.parameter.name.for.layer." + std::to_string(i),
                            DType::kF32, {2}, value)
                .ok());
  writer.set_global_state({2, "null", "null"});
  REQUIRE(writer.finish().ok());
  CommitOptions c;
  c.checkpoint_dir = dir.path();
  c.step = 2;
  FakeClock clock;
  REQUIRE(try_commit_checkpoint(fs(), clock, c).ok());
  const std::string step_dir = dir / "step-000000002";
  auto intact = CheckpointReader::open(fs(), step_dir);
  REQUIRE(intact.ok());
  REQUIRE(intact->open_all_shards().ok());
  // A byte inside the header's ninth block: a digit of some data_offsets, say.
  const uint64_t offset = 8 * 4096 + 1000;
  const std::string shard = step_dir + "/shard-00000-of-00001.safetensors";
  REQUIRE(std::filesystem::file_size(shard) > 60000);
  flip_byte(shard, offset);
  auto reader = CheckpointReader::open(fs(), step_dir);
  REQUIRE(reader.ok());
  auto st = reader->open_all_shards();
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message() ==
        "step-000000002/shard-00000-of-00001.safetensors: block at "
        "offset 32768 (4 KiB) fails its checksum");
  CHECK(reader->checksum_failure()->offset == 32768u);
}

TEST_CASE("an intact format-2 checkpoint reads back on every path, and says nothing failed",
          "[reader][corruption]") {
  TwoRankStep fx;
  const bool cold = GENERATE(true, false);
  const size_t min_pread = GENERATE(size_t{1}, size_t{1} << 30);
  if (cold) evict(fx.step_dir);
  auto reader = CheckpointReader::open(
      fs(), fx.step_dir, ReaderOptions{.request_bytes = 3 * 4096, .min_pread_bytes = min_pread});
  REQUIRE(reader.ok());
  for (const Box& box : {fx.rows(0, 300), fx.rows(149, 151), Box{{3, 5}, {290, 100}}}) {
    Bytes out(box.volume() * 4);
    REQUIRE(error_of(reader->read("w", box, out)) == "ok");
    CHECK(out == fx.want(box));
  }
  CHECK(reader->read_whole("bias").value_or(Bytes{}) == fx.bias);
  CHECK_FALSE(reader->checksum_failure().has_value());
  CHECK(reader->manifest().version == kManifestVersion);
  for (const auto& f : reader->manifest().files) {
    CHECK(f.block_bytes == kBlock);
    CHECK(f.block_xxh3.size() == checksum_block_count(f.size, kBlock));
  }
}

TEST_CASE("a block checked once is not hashed again by the same reader", "[reader][corruption]") {
  TwoRankStep fx;
  auto reader = CheckpointReader::open(fs(), fx.step_dir);
  REQUIRE(reader.ok());
  Bytes out(kCols * 4);
  REQUIRE(reader->read("w", fx.rows(299, 300), out).ok());
  // Changed behind the reader's back after its check: this reader trusts its verdict (the
  // cost of checking once), a new reader does not.
  flip_byte(fx.shard1, std::filesystem::file_size(fx.shard1) - 8);
  CHECK(reader->read("w", fx.rows(299, 300), out).ok());
  auto fresh = CheckpointReader::open(fs(), fx.step_dir);
  REQUIRE(fresh.ok());
  CHECK_FALSE(fresh->read("w", fx.rows(299, 300), out).ok());
}

TEST_CASE("threads racing over the same blocks agree on every verdict", "[reader][corruption]") {
  TwoRankStep fx;
  flip_byte(fx.shard1, std::filesystem::file_size(fx.shard1) - 1);  // the last block
  auto reader = CheckpointReader::open(fs(), fx.step_dir, ReaderOptions{.request_bytes = 4096});
  REQUIRE(reader.ok());
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        Bytes good(200 * kCols * 4), bad(kCols * 4);
        if (!reader->read("w", fx.rows(0, 200), good).ok() || good != fx.want(fx.rows(0, 200)))
          ++wrong;
        auto st = reader->read("w", fx.rows(299, 300), bad);
        if (st.ok() || st.error().message().find("block at offset 589824 (64 KiB)") ==
                           std::string::npos)
          ++wrong;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
}

// The regression of issue 17: main resumed from a shard with one flipped byte and trained on.
TEST_CASE("one flipped byte in the newest shard fails its load (it loaded silently)",
          "[reader][corruption][regression]") {
  shardguard::testing::TempDir dir;
  FakeClock clock;
  const shardguard::testing::StepShape shape{64, 4096};  // 1 MiB of weights
  REQUIRE(shardguard::testing::write_step(fs(), clock, dir.path(), 100, 2, shape).ok());
  REQUIRE(shardguard::testing::write_step(fs(), clock, dir.path(), 200, 2, shape).ok());
  const std::string shard = dir / "step-000000200/shard-00001-of-00002.safetensors";
  flip_byte(shard, std::filesystem::file_size(shard) - 1000);  // a weight, same size

  // Resume picks the newest checkpoint by size, as by default...
  auto latest = latest_complete(fs(), dir.path(), Verify::kSize);
  REQUIRE(latest.ok());
  REQUIRE(latest->step == 200);
  // ...and loading it now fails, naming the file and the block.
  auto reader = CheckpointReader::open(fs(), latest->dir);
  REQUIRE(reader.ok());
  auto w = reader->read_whole("w");
  REQUIRE_FALSE(w.ok());
  CHECK(w.error().code() == ErrorCode::kCorrupt);
  CHECK_THAT(w.error().message(),
             Catch::Contains("step-000000200/shard-00001-of-00002.safetensors: block at offset "
                             "0 (2 MiB) fails its checksum"));
  // The previous checkpoint loads bit for bit.
  CHECK(error_of(shardguard::testing::check_step(fs(), dir / "step-000000100", 100, shape)) ==
        "ok");
}

}  // namespace
}  // namespace shardguard::checkpoint
