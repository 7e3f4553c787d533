// Tests for the reader's pread path (ReaderOptions in checkpoint/reader.h): long runs read
// with pread or O_DIRECT, cut into requests, on several threads. Every read is checked bit for
// bit against a naive extraction, for files evicted from the page cache (O_DIRECT) and cached
// (pread, or memcpy from the mapping when the buffer is not aligned like the file), with
// buffers at any alignment, runs and requests that start and end inside 4 KiB blocks, chunks
// that straddle blocks, and runs that end at a file end that is not block aligned. Also:
// injected read faults surface as errors naming the tensor and the file, and clear.
#include <fcntl.h>
#include <unistd.h>

#include <xxhash.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <set>

#include "checkpoint/commit.h"
#include "checkpoint/reader.h"
#include "checkpoint/verify.h"
#include "checkpoint/writer.h"
#include "core/clock.h"
#include "core/fault_fs.h"
#include "tests/checkpoint/tensor_fixtures.h"
#include "tests/support/temp_dir.h"

namespace shardguard::checkpoint {
namespace {

using testing::Bytes;
using testing::extract_naive;
using testing::Rng;
using testing::SyntheticTensor;

Filesystem& fs() { return PosixFilesystem::instance(); }

// Drops every file under `dir` from the page cache, as the bench does before a cold load.
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

// Reads every file under `dir` through the page cache.
void cache(const std::string& dir) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) REQUIRE(fs().read_file(e.path().string()).ok());
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// A buffer whose data starts `shift` bytes after a 4 KiB boundary.
class ShiftedBuffer {
 public:
  ShiftedBuffer(size_t size, size_t shift) : size_(size), shift_(shift) {
    void* p = nullptr;
    REQUIRE(::posix_memalign(&p, 4096, size + shift + 1) == 0);
    mem_.reset(static_cast<std::byte*>(p));
    std::memset(p, 0xA5, size + shift + 1);
  }
  std::span<std::byte> span() { return {mem_.get() + shift_, size_}; }
  Bytes bytes() const { return Bytes(mem_.get() + shift_, mem_.get() + shift_ + size_); }
  // The byte after the buffer, which a read must not touch.
  std::byte guard() const { return mem_.get()[shift_ + size_]; }

 private:
  std::unique_ptr<std::byte, FreeDeleter> mem_;
  size_t size_, shift_;
};

Bytes read_shifted(const CheckpointReader& reader, const SyntheticTensor& t, const Box& box,
                   size_t shift) {
  ShiftedBuffer buf(box.volume() * testing::element_bytes(t.dtype), shift);
  auto st = reader.read(t.name, box, buf.span());
  INFO((st.ok() ? std::string("ok") : st.error().message()));
  REQUIRE(st.ok());
  CHECK(buf.guard() == std::byte{0xA5});
  return buf.bytes();
}

SyntheticTensor make_tensor(std::string name, DType dtype, std::vector<uint64_t> shape,
                            std::vector<Box> chunks, Rng& rng) {
  SyntheticTensor t{std::move(name), dtype, std::move(shape), {}, std::move(chunks)};
  t.global = testing::random_bytes(Box::whole(t.shape).volume() * testing::element_bytes(dtype),
                                   rng);
  return t;
}

// Rows [r0, r1) of a 2-D tensor.
Box rows(const SyntheticTensor& t, uint64_t r0, uint64_t r1) {
  return Box{{r0, 0}, {r1 - r0, t.shape[1]}};
}

// Tensors whose chunk data start and end inside 4 KiB blocks (rows of 4000 and 1554 bytes,
// the safetensors data aligned to 8 only), split by rows over two shards; the last tensor
// of each shard ends the file at an unaligned size.
std::vector<SyntheticTensor> odd_tensors(Rng& rng) {
  std::vector<SyntheticTensor> ts;
  ts.push_back(make_tensor("a", DType::kF32, {97, 1000},
                           {Box{{0, 0}, {40, 1000}}, Box{{40, 0}, {57, 1000}}}, rng));
  ts.push_back(make_tensor("b", DType::kBF16, {33, 777},
                           {Box{{0, 0}, {11, 777}}, Box{{11, 0}, {22, 777}}}, rng));
  ts.push_back(make_tensor("c", DType::kU8, {5, 10007},
                           {Box{{0, 0}, {3, 10007}}, Box{{3, 0}, {2, 10007}}}, rng));
  return ts;
}

TEST_CASE("Long runs read with pread are bitwise equal, cold or cached, at any alignment",
          "[reader][pread]") {
  Rng rng(7);
  shardguard::testing::TempDir dir;
  const auto tensors = odd_tensors(rng);
  const std::string step_dir = dir / "step-000000001";
  testing::write_synthetic_checkpoint(step_dir, 1, 2, tensors);

  const bool direct = GENERATE(true, false);
  const bool cold = GENERATE(true, false);
  // Small requests, so that runs are cut into many pieces at 8 KiB file offsets.
  ReaderOptions options{.io_threads = 3, .request_bytes = 8192, .min_pread_bytes = 1,
                        .direct_io = direct};
  INFO("direct " << direct << " cold " << cold);
  if (cold) evict(step_dir); else cache(step_dir);
  auto reader = CheckpointReader::open(fs(), step_dir, options);
  REQUIRE(reader.ok());
  for (const SyntheticTensor& t : tensors) {
    const Box whole = Box::whole(t.shape);
    const size_t elem = testing::element_bytes(t.dtype);
    const uint64_t n = t.shape[0];
    const uint64_t split = t.chunks[0].sizes[0];
    for (const Box& box : {whole, rows(t, 0, 1), rows(t, n - 1, n), rows(t, 1, n - 1),
                           rows(t, split - 1, split + 1), rows(t, split, n), rows(t, 2, 2)}) {
      for (size_t shift : {size_t{0}, size_t{1}, size_t{16}, size_t{64}, size_t{4095}}) {
        INFO(t.name << " box " << box.to_string() << " shift " << shift);
        CHECK(read_shifted(*reader, t, box, shift) == extract_naive(t.global, whole, box, elem));
      }
      if (cold) evict(step_dir);  // keep the next reads cold
    }
  }
}

TEST_CASE("The pread path agrees with the mapping for random reshards", "[reader][pread]") {
  const uint64_t seed = GENERATE(range(1, 11));
  Rng rng(seed);
  shardguard::testing::TempDir dir;
  const auto world = static_cast<uint32_t>(testing::uniform(rng, 1, 5));
  std::vector<SyntheticTensor> tensors;
  for (int i = 0; i < 3; ++i) {
    SyntheticTensor t{"t" + std::to_string(i), testing::random_byte_dtype(rng),
                      testing::random_shape(rng, 1, 3, 40), {}, {}};
    t.global = testing::random_bytes(
        Box::whole(t.shape).volume() * testing::element_bytes(t.dtype), rng);
    t.chunks = testing::random_partition(t.shape, world, rng);
    tensors.push_back(std::move(t));
  }
  const std::string step_dir = dir / "step-000000002";
  testing::write_synthetic_checkpoint(step_dir, 2, world, tensors);
  const bool direct = seed % 2 == 0;
  evict(step_dir);
  ReaderOptions options{.io_threads = 4, .request_bytes = 4096, .min_pread_bytes = 1,
                        .direct_io = direct};
  auto reader = CheckpointReader::open(fs(), step_dir, options);
  auto mapped = CheckpointReader::open(fs(), step_dir,
                                       ReaderOptions{.min_pread_bytes = ~size_t{0}});
  REQUIRE(reader.ok());
  REQUIRE(mapped.ok());
  for (const SyntheticTensor& t : tensors) {
    const Box whole = Box::whole(t.shape);
    const size_t elem = testing::element_bytes(t.dtype);
    std::vector<Box> boxes = testing::random_partition(t.shape, testing::uniform(rng, 1, 6), rng);
    for (int i = 0; i < 4; ++i) boxes.push_back(testing::random_box(t.shape, rng));
    boxes.push_back(whole);
    for (const Box& box : boxes) {
      INFO(t.name << " " << whole.to_string() << " box " << box.to_string());
      const size_t shift = testing::uniform(rng, 0, 70);
      const Bytes want = extract_naive(t.global, whole, box, elem);
      CHECK(read_shifted(*reader, t, box, shift) == want);
      CHECK(read_shifted(*mapped, t, box, shift) == want);
    }
    CHECK(reader->tensor_xxh3_64(t.name, 100).value_or(0) ==
          mapped->tensor_xxh3_64(t.name, 100).value_or(1));
  }
}

// A row-split checkpoint written by ShardWriter (data 4 KiB aligned, O_DIRECT writes), read
// back by 3 ranks with the default options and with tiny requests.
TEST_CASE("Row boxes of a ShardWriter checkpoint read back by another world size",
          "[reader][pread]") {
  Rng rng(11);
  shardguard::testing::TempDir dir;
  const std::vector<uint64_t> shape{300, 1024};
  SyntheticTensor t = make_tensor("w", DType::kF32, shape, {}, rng);
  const Box whole = Box::whole(shape);
  for (uint32_t rank = 0; rank < 2; ++rank) {
    WriterOptions o;
    o.checkpoint_dir = dir.path();
    o.step = 3;
    o.rank = rank;
    o.world_size = 2;
    ShardWriter writer(fs(), o);
    const Box box{{rank * 150ull, 0}, {150, 1024}};
    const Bytes part = extract_naive(t.global, whole, box, 4);
    REQUIRE(writer.add_chunk("w", DType::kF32, shape, box, part).ok());
    if (rank == 0) writer.set_global_state({3, "null", "null"});
    auto sidecar = writer.finish();
    INFO((sidecar.ok() ? std::string("ok") : sidecar.error().message()));
    REQUIRE(sidecar.ok());
  }
  CommitOptions c;
  c.checkpoint_dir = dir.path();
  c.step = 3;
  c.world_size = 2;
  FakeClock clock;
  REQUIRE(try_commit_checkpoint(fs(), clock, c).ok());
  const std::string step_dir = dir / "step-000000003";

  const size_t request = GENERATE(size_t{4} << 20, size_t{12288});
  const bool cold = GENERATE(true, false);
  if (cold) evict(step_dir); else cache(step_dir);
  auto reader = CheckpointReader::open(fs(), step_dir, ReaderOptions{.request_bytes = request});
  REQUIRE(reader.ok());
  for (uint64_t r = 0; r < 3; ++r) {
    const Box box = rows(t, r * 100, (r + 1) * 100);  // straddles the chunk boundary at 150
    for (size_t shift : {size_t{0}, size_t{8}, size_t{100}}) {
      INFO("request " << request << " cold " << cold << " box " << box.to_string() << " shift "
                      << shift);
      CHECK(read_shifted(*reader, t, box, shift) == extract_naive(t.global, whole, box, 4));
    }
  }
}

TEST_CASE("Injected read faults fail reads naming the tensor and file, then clear",
          "[reader][pread][fault]") {
  Rng rng(5);
  shardguard::testing::TempDir dir;
  const auto tensors = odd_tensors(rng);
  const std::string step_dir = dir / "step-000000004";
  testing::write_synthetic_checkpoint(step_dir, 4, 2, tensors);
  FaultInjectingFilesystem faulty(fs());
  const bool direct = GENERATE(true, false);
  ReaderOptions options{.io_threads = 2, .request_bytes = 8192, .min_pread_bytes = 1,
                        .direct_io = direct};

  SECTION("a failed map or open leaves nothing cached: the next read retries") {
    auto reader = CheckpointReader::open(faulty, step_dir, options);
    REQUIRE(reader.ok());
    faulty.fail_nth_read(1, EIO);
    auto st = reader->open_all_shards();
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code() == ErrorCode::kIo);
    CHECK_THAT(st.error().message(), Catch::Contains("(injected)"));
    CHECK(reader->open_all_shards().ok());
  }

  SECTION("a failed read fails read() and tensor_xxh3_64()") {
    auto reader = CheckpointReader::open(faulty, step_dir, options);
    REQUIRE(reader.ok());
    REQUIRE(reader->open_all_shards().ok());
    const SyntheticTensor& a = tensors[0];
    evict(step_dir);  // cold: every run goes through read_at, direct or not
    faulty.fail_nth_read(1, EIO, /*sticky=*/true);
    const int mutating = faulty.operations();
    ShiftedBuffer buf(Box::whole(a.shape).volume() * 4, 0);
    auto st = reader->read("a", Box::whole(a.shape), buf.span());
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code() == ErrorCode::kIo);
    CHECK_THAT(st.error().message(), Catch::Contains("tensor 'a'") &&
                                         Catch::Contains("shard-0000") &&
                                         Catch::Contains("(injected)"));
    CHECK_FALSE(reader->tensor_xxh3_64("a", 4096).ok());
    CHECK(faulty.operations() == mutating);  // reads never count as mutating operations
    faulty.clear_faults();
    evict(step_dir);
    CHECK(read_shifted(*reader, a, Box::whole(a.shape), 0) ==
          extract_naive(a.global, Box::whole(a.shape), Box::whole(a.shape), 4));
  }
}

TEST_CASE("read_many reads several tensors together: the same bytes, progress per tensor",
          "[reader][pread]") {
  Rng rng(11);
  shardguard::testing::TempDir dir;
  const auto tensors = odd_tensors(rng);
  const std::string step_dir = dir / "step-000000002";
  testing::write_synthetic_checkpoint(step_dir, 2, 2, tensors);
  std::mutex mu;
  std::multiset<uint64_t> told;
  ReaderOptions options{.io_threads = 3, .request_bytes = 8192, .min_pread_bytes = 1};
  options.on_read = [&](uint64_t n) {
    std::lock_guard lock(mu);  // read_many tells from its reading threads
    told.insert(n);
  };
  evict(step_dir);
  auto reader = CheckpointReader::open(fs(), step_dir, options);
  REQUIRE(reader.ok());
  // Whole tensors, a box across both chunks, and an empty box, at odd alignments.
  std::vector<Box> boxes = {Box::whole(tensors[0].shape), rows(tensors[1], 5, 20),
                            rows(tensors[2], 2, 2), Box::whole(tensors[2].shape)};
  std::vector<const SyntheticTensor*> of = {&tensors[0], &tensors[1], &tensors[2], &tensors[2]};
  std::vector<ShiftedBuffer> bufs;
  std::vector<CheckpointReader::TensorRead> reads;
  for (size_t i = 0; i < boxes.size(); ++i)
    bufs.emplace_back(boxes[i].volume() * testing::element_bytes(of[i]->dtype), 1 + 17 * i);
  std::multiset<uint64_t> sizes;
  for (size_t i = 0; i < boxes.size(); ++i) {
    reads.push_back({of[i]->name, boxes[i], bufs[i].span()});
    sizes.insert(bufs[i].span().size());
  }
  auto st = reader->read_many(reads);
  INFO((st.ok() ? std::string("ok") : st.error().message()));
  REQUIRE(st.ok());
  for (size_t i = 0; i < boxes.size(); ++i) {
    const SyntheticTensor& t = *of[i];
    CHECK(bufs[i].bytes() == extract_naive(t.global, Box::whole(t.shape), boxes[i],
                                           testing::element_bytes(t.dtype)));
    CHECK(bufs[i].guard() == std::byte{0xA5});
  }
  CHECK(told == sizes);
  CHECK(reader->read_many({}).ok());

  SECTION("a box that does not fit its buffer fails before any read, naming its tensor") {
    reads[1].out = reads[1].out.first(reads[1].out.size() - 1);
    auto bad = reader->read_many(reads);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().code() == ErrorCode::kInvalid);
    CHECK_THAT(bad.error().message(), Catch::Contains("tensor 'b'"));
  }
}

TEST_CASE("read_many names the tensor whose bytes fail their checksum", "[reader][pread]") {
  Rng rng(13);
  shardguard::testing::TempDir dir;
  // "a" lives whole in shard 0; rows [1, 64) of "z" live in shard 1 only.
  std::vector<SyntheticTensor> ts;
  ts.push_back(make_tensor("a", DType::kF32, {64, 512}, {Box{{0, 0}, {64, 512}}}, rng));
  ts.push_back(make_tensor("z", DType::kF32, {64, 512},
                           {Box{{0, 0}, {1, 512}}, Box{{1, 0}, {63, 512}}}, rng));
  const std::string step_dir = dir / "step-000000003";
  testing::write_synthetic_checkpoint(step_dir, 3, 2, ts);
  const std::string shard1 = step_dir + "/" + shard_file_name(1, 2);
  Bytes file = testing::read_bytes(shard1);
  file.back() ^= std::byte{1};  // z's last byte
  testing::write_bytes(shard1, file);
  const bool z_first = GENERATE(false, true);
  auto reader = CheckpointReader::open(
      fs(), step_dir, {.io_threads = 2, .request_bytes = 8192, .min_pread_bytes = 1});
  REQUIRE(reader.ok());
  std::vector<std::byte> a(64 * 512 * 4), z(63 * 512 * 4);
  std::vector<CheckpointReader::TensorRead> reads = {{"a", Box::whole(ts[0].shape), a},
                                                      {"z", rows(ts[1], 1, 64), z}};
  if (z_first) std::swap(reads[0], reads[1]);
  auto st = reader->read_many(reads);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code() == ErrorCode::kCorrupt);
  CHECK_THAT(st.error().message(), Catch::Contains("tensor 'z'") &&
                                       !Catch::Contains("tensor 'a'") &&
                                       Catch::Contains("fails its checksum"));
  CHECK(reader->read("a", Box::whole(ts[0].shape), a).ok());
}

TEST_CASE("File checksums read uncached files with O_DIRECT and match the mapping's",
          "[verify][pread]") {
  Rng rng(3);
  shardguard::testing::TempDir dir;
  // Large enough for the direct path (two 8 MiB steps), with a ragged end.
  const size_t size = GENERATE(size_t{16} << 20, (size_t{37} << 20) + 123);
  const std::string path = dir / "blob";
  const Bytes data = testing::random_bytes(size, rng);
  testing::write_bytes(path, data);
  const XXH128_hash_t want_hash = XXH3_128bits(data.data(), data.size());
  const std::string want = xxh3_128_hex(want_hash.high64, want_hash.low64);

  evict(dir.path());
  uint64_t seen = 0;
  auto cold = file_xxh3_128(fs(), path, [&](uint64_t n) { seen += n; });
  REQUIRE(cold.ok());
  CHECK(*cold == want);
  CHECK(seen == size);
  cache(dir.path());
  CHECK(file_xxh3_128(fs(), path).value_or("") == want);

  FaultInjectingFilesystem faulty(fs());
  evict(dir.path());
  faulty.fail_nth_read(3, EIO);  // map, open, then the first block read fails
  auto failed = file_xxh3_128(faulty, path);
  REQUIRE_FALSE(failed.ok());
  CHECK_THAT(failed.error().message(), Catch::Contains(path) && Catch::Contains("(injected)"));
  faulty.clear_faults();
  evict(dir.path());
  CHECK(file_xxh3_128(faulty, path).value_or("") == want);
}

}  // namespace
}  // namespace shardguard::checkpoint
