// Tests for checkpoint/reader.h and checkpoint/hf_index.h: resharding through real files
// (W ranks write, R ranks read random boxes), world-size-independent tensor hashes, every
// kind of bad shard reported with the file and tensor, and Hugging Face directories.
#include "checkpoint/reader.h"

#include <xxhash.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <thread>

#include "checkpoint/catalog.h"
#include "checkpoint/commit.h"
#include "checkpoint/hf_index.h"
#include "checkpoint/writer.h"
#include "core/clock.h"
#include "tests/checkpoint/tensor_fixtures.h"
#include "tests/support/temp_dir.h"

namespace shardguard::checkpoint {
namespace {

using testing::Bytes;
using testing::extract_naive;
using testing::Rng;
using testing::SyntheticTensor;

Filesystem& fs() { return PosixFilesystem::instance(); }

uint64_t xxh64(const Bytes& b) { return XXH3_64bits(b.data(), b.size()); }

Bytes read_box(const CheckpointReader& reader, const std::string& name, const Box& box) {
  const TensorRecord* t = reader.tensor(name);
  REQUIRE(t != nullptr);
  Bytes out(box.volume() * testing::element_bytes(t->dtype));
  auto st = reader.read(name, box, out);
  INFO((st.ok() ? std::string("ok") : st.error().message()));
  REQUIRE(st.ok());
  return out;
}

// Checks that `reader` gives back every tensor of `tensors` bit for bit, as whole tensors,
// as R random partitions and as random boxes.
void check_reads(const CheckpointReader& reader, const std::vector<SyntheticTensor>& tensors,
                 Rng& rng) {
  for (const SyntheticTensor& t : tensors) {
    const Box whole = Box::whole(t.shape);
    const size_t elem = testing::element_bytes(t.dtype);
    INFO("tensor " << t.name << " " << whole.to_string() << " " << dtype_name(t.dtype));
    auto all = reader.read_whole(t.name);
    REQUIRE(all.ok());
    CHECK(*all == t.global);
    const size_t readers = testing::uniform(rng, 1, 8);
    for (const Box& box : testing::random_partition(t.shape, readers, rng))
      CHECK(read_box(reader, t.name, box) == extract_naive(t.global, whole, box, elem));
    for (int i = 0; i < 4; ++i) {
      const Box box = testing::random_box(t.shape, rng);
      INFO("box " << box.to_string());
      CHECK(read_box(reader, t.name, box) == extract_naive(t.global, whole, box, elem));
    }
  }
}

TEST_CASE("W ranks write, R ranks read any box, bitwise equal", "[reader][property]") {
  const uint64_t seed = GENERATE(range(1, 26));
  Rng rng(seed);
  shardguard::testing::TempDir dir;
  const auto world = static_cast<uint32_t>(testing::uniform(rng, 1, 8));
  std::vector<SyntheticTensor> tensors;
  for (int i = 0, n = static_cast<int>(testing::uniform(rng, 1, 3)); i < n; ++i)
    tensors.push_back(testing::random_tensor("layer." + std::to_string(i), world, rng));
  const std::string step_dir = dir / "step-000000010";
  testing::write_synthetic_checkpoint(step_dir, 10, world, tensors);

  auto reader = CheckpointReader::open(fs(), step_dir);
  REQUIRE(reader.ok());
  CHECK(reader->manifest().world_size == world);
  REQUIRE(reader->open_all_shards().ok());
  check_reads(*reader, tensors, rng);

  SECTION("the tensor hash does not depend on the world size or the block size") {
    const auto other_world = static_cast<uint32_t>(testing::uniform(rng, 1, 8));
    for (auto& t : tensors) t.chunks = testing::random_partition(t.shape, other_world, rng);
    const std::string other_dir = dir / "other";
    testing::write_synthetic_checkpoint(other_dir, 10, other_world, tensors);
    auto other = CheckpointReader::open(fs(), other_dir + "/manifest.json");
    REQUIRE(other.ok());
    for (const auto& t : tensors) {
      const uint64_t want = xxh64(t.global);
      for (uint64_t block : {uint64_t{1}, uint64_t{5}, uint64_t{64}, kHashBlockBytes}) {
        INFO(t.name << " block " << block);
        CHECK(reader->tensor_xxh3_64(t.name, block).value_or(0) == want);
        CHECK(other->tensor_xxh3_64(t.name, block).value_or(0) == want);
      }
    }
  }
}

// Each rank of `world` writes its chunks (chunk i on rank i % world) with ShardWriter, then
// the step is committed: the real write path, end to end.
void write_with_shard_writer(const std::string& checkpoint_dir, uint64_t step, uint32_t world,
                             const std::vector<SyntheticTensor>& tensors) {
  for (uint32_t rank = 0; rank < world; ++rank) {
    WriterOptions o;
    o.checkpoint_dir = checkpoint_dir;
    o.step = step;
    o.rank = rank;
    o.world_size = world;
    o.io_threads = 2;
    o.block_size = 4096;
    ShardWriter writer(fs(), o);
    std::vector<Bytes> keep;  // chunk bytes must live until finish()
    for (const SyntheticTensor& t : tensors) {
      const Box whole = Box::whole(t.shape);
      for (size_t i = rank; i < t.chunks.size(); i += world) {
        keep.push_back(
            extract_naive(t.global, whole, t.chunks[i], testing::element_bytes(t.dtype)));
        auto st = t.chunks.size() == 1
                      ? writer.add_tensor(t.name, t.dtype, t.shape, keep.back())
                      : writer.add_chunk(t.name, t.dtype, t.shape, t.chunks[i], keep.back());
        INFO(t.name << " chunk " << t.chunks[i].to_string() << ": "
                    << (st.ok() ? std::string("ok") : st.error().message()));
        REQUIRE(st.ok());
      }
    }
    writer.set_rank_state({"rng-" + std::to_string(rank), "null", "null"});
    if (rank == 0) writer.set_global_state({step, "null", "null"});
    auto sidecar = writer.finish();
    INFO((sidecar.ok() ? std::string("ok") : sidecar.error().message()));
    REQUIRE(sidecar.ok());
  }
  FakeClock clock;
  CommitOptions c;
  c.checkpoint_dir = checkpoint_dir;
  c.step = step;
  c.world_size = world;
  auto manifest = try_commit_checkpoint(fs(), clock, c);
  INFO((manifest.ok() ? std::string("ok") : manifest.error().message()));
  REQUIRE(manifest.ok());
}

TEST_CASE("through ShardWriter and commit: W write, R read, hashes agree", "[reader][property]") {
  const uint64_t seed = GENERATE(range(100, 112));
  Rng rng(seed);
  shardguard::testing::TempDir dir;
  const auto world = static_cast<uint32_t>(testing::uniform(rng, 1, 8));
  std::vector<SyntheticTensor> tensors;
  for (int i = 0, n = static_cast<int>(testing::uniform(rng, 1, 3)); i < n; ++i)
    tensors.push_back(testing::random_tensor("p" + std::to_string(i), world, rng));
  INFO("seed " << seed << " world " << world);
  write_with_shard_writer(dir.path(), 42, world, tensors);

  auto latest = latest_complete(fs(), dir.path(), Verify::kChecksum);
  INFO((latest.ok() ? std::string("ok") : latest.error().message()));
  REQUIRE(latest.ok());
  CHECK(latest->step == 42);
  auto reader = CheckpointReader::open(fs(), latest->dir);
  REQUIRE(reader.ok());
  REQUIRE(reader->open_all_shards().ok());
  check_reads(*reader, tensors, rng);
  CHECK(reader->rank_state(world - 1).rng == "rng-" + std::to_string(world - 1));
  for (const auto& t : tensors)
    CHECK(reader->tensor_xxh3_64(t.name, 16).value_or(0) == xxh64(t.global));
}

TEST_CASE("scalars, zero-size tensors and empty ranks", "[reader]") {
  shardguard::testing::TempDir dir;
  Rng rng(7);
  SyntheticTensor scalar{"scalar", DType::kF64, {}, testing::random_bytes(8, rng), {Box{}}};
  SyntheticTensor empty{"empty", DType::kF32, {0, 3}, {}, {}};
  empty.chunks = {Box{{0, 0}, {0, 3}}, Box{{0, 0}, {0, 1}}, Box{{0, 1}, {0, 2}}};
  SyntheticTensor row{"row", DType::kU8, {5}, testing::random_bytes(5, rng), {Box{{0}, {5}}}};
  const std::vector<SyntheticTensor> tensors{scalar, empty, row};
  testing::write_synthetic_checkpoint(dir.path(), 3, 4, tensors);  // ranks 2, 3 hold nothing
  auto reader = CheckpointReader::open(fs(), dir.path());
  REQUIRE(reader.ok());
  CHECK(reader->tensor_names() == std::vector<std::string>{"empty", "row", "scalar"});
  CHECK(reader->read_whole("scalar").value() == scalar.global);
  CHECK(reader->read_whole("empty").value().empty());
  CHECK(reader->tensor_xxh3_64("empty").value() == XXH3_64bits(nullptr, 0));
  CHECK(reader->tensor_xxh3_64("scalar").value() == xxh64(scalar.global));
  CHECK(reader->open_all_shards().ok());
}

TEST_CASE("state, names and argument errors", "[reader]") {
  shardguard::testing::TempDir dir;
  Rng rng(3);
  std::vector<SyntheticTensor> tensors{testing::random_tensor("w", 2, rng)};
  tensors[0].dtype = DType::kF32;
  tensors[0].shape = {4, 4};
  tensors[0].global = testing::random_bytes(64, rng);
  tensors[0].chunks = testing::split_along(tensors[0].shape, 0, 2, rng);
  testing::write_synthetic_checkpoint(dir.path(), 5, 2, tensors);
  auto reader = CheckpointReader::open(fs(), dir.path() + "/");
  REQUIRE(reader.ok());
  CHECK(reader->rank_state(1).rng == "rng-1");
  CHECK(reader->rank_state(1).data_position == R"({"batch":1})");
  CHECK(reader->rank_state(9).data_position == "null");
  CHECK(reader->global().step == 5);
  CHECK(reader->tensor("nope") == nullptr);

  Bytes out(16);
  auto unknown = reader->read("nope", Box{{0}, {4}}, out);
  CHECK(unknown.error().code() == ErrorCode::kNotFound);
  auto outside = reader->read("w", Box{{3, 0}, {2, 2}}, out);
  CHECK(outside.error().code() == ErrorCode::kInvalid);
  CHECK_THAT(outside.error().message(), Catch::Contains("'w'"));
  auto small = reader->read("w", Box{{0, 0}, {2, 4}}, out);
  CHECK(small.error().code() == ErrorCode::kInvalid);
  CHECK_THAT(small.error().message(), Catch::Contains("needs 32 bytes"));
}

TEST_CASE("concurrent readers share the shard cache", "[reader]") {
  shardguard::testing::TempDir dir;
  Rng rng(11);
  std::vector<SyntheticTensor> tensors;
  for (int i = 0; i < 4; ++i)
    tensors.push_back(testing::random_tensor("t" + std::to_string(i), 4, rng));
  testing::write_synthetic_checkpoint(dir.path(), 1, 4, tensors);
  auto reader = CheckpointReader::open(fs(), dir.path());
  REQUIRE(reader.ok());
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&] {
      for (const auto& t : tensors)
        if (reader->read_whole(t.name).value_or({}) != t.global) ++bad;
    });
  for (auto& th : threads) th.join();
  CHECK(bad == 0);
}

// A one-rank checkpoint of "w" (F32 [4,4], whole) and "b" (F32 [4]), for breaking. Its
// manifest lists no checksums, so that the reader's own checks of the file's structure are
// what meets the damage (with checksums, any changed byte is a bad block first:
// tests/checkpoint/corruption_test.cc).
struct BrokenFixture {
  shardguard::testing::TempDir dir;
  Manifest manifest;
  std::string shard = "shard-00000-of-00001.safetensors";
  std::string shard_path;

  BrokenFixture() {
    Rng rng(5);
    std::vector<SyntheticTensor> tensors{
        {"w", DType::kF32, {4, 4}, testing::random_bytes(64, rng), {Box{{0, 0}, {4, 4}}}},
        {"b", DType::kF32, {4}, testing::random_bytes(16, rng), {Box{{0}, {4}}}}};
    manifest = testing::write_synthetic_checkpoint(dir.path(), 1, 1, tensors, true, 0);
    manifest.files[0].xxh3_128.clear();
    shard_path = dir / shard;
  }

  // The error of reading "w" through a reader over `m`.
  Error read_error(const Manifest& m) {
    auto reader = CheckpointReader::from_manifest(fs(), dir.path(), m);
    Bytes out(64);
    auto st = reader.read("w", Box{{0, 0}, {4, 4}}, out);
    REQUIRE_FALSE(st.ok());
    CHECK_FALSE(reader.open_all_shards().ok());
    return st.error();
  }
};

void expect_names(const Error& e, std::initializer_list<std::string> fragments) {
  INFO(e.message());
  CHECK(e.code() == ErrorCode::kCorrupt);
  for (const auto& f : fragments) CHECK_THAT(e.message(), Catch::Contains(f));
}

TEST_CASE("bad shards are errors naming the file and tensor", "[reader]") {
  BrokenFixture fx;
  Bytes file = testing::read_bytes(fx.shard_path);
  SECTION("truncated shard (manifest lists the full size)") {
    file.resize(file.size() - 5);
    testing::write_bytes(fx.shard_path, file);
    expect_names(fx.read_error(fx.manifest), {fx.shard, "'w'", "manifest lists"});
  }
  SECTION("truncated shard (manifest agrees with the short size)") {
    file.resize(file.size() - 5);
    testing::write_bytes(fx.shard_path, file);
    Manifest m = fx.manifest;
    m.files[0].size = file.size();
    expect_names(fx.read_error(m), {fx.shard, "truncated"});
  }
  SECTION("shard shorter than the length prefix") {
    file.resize(5);
    testing::write_bytes(fx.shard_path, file);
    Manifest m = fx.manifest;
    m.files[0].size = 5;
    expect_names(fx.read_error(m), {fx.shard, "too small"});
  }
  SECTION("header length beyond the file") {
    const uint64_t n = file.size() + 100;
    for (int i = 0; i < 8; ++i) file[i] = static_cast<std::byte>(n >> (8 * i));
    testing::write_bytes(fx.shard_path, file);
    expect_names(fx.read_error(fx.manifest), {fx.shard, "runs past the end"});
  }
  SECTION("file listed larger than it is") {
    Manifest m = fx.manifest;
    m.files[0].size += 100;
    expect_names(fx.read_error(m), {fx.shard, "manifest lists"});
  }
  SECTION("missing shard") {
    std::filesystem::remove(fx.shard_path);
    auto e = fx.read_error(fx.manifest);
    INFO(e.message());
    CHECK_THAT(e.message(), Catch::Contains(fx.shard));
  }
  SECTION("chunk key missing in file") {
    Manifest m = fx.manifest;
    m.tensors.at("b").chunks[0].key = "b@0";
    expect_names(fx.read_error(m), {fx.shard, "'b'", "'b@0' not in file"});
  }
  SECTION("dtype mismatch") {
    Manifest m = fx.manifest;
    m.tensors.at("w").dtype = DType::kI32;
    expect_names(fx.read_error(m), {fx.shard, "'w'", "dtype F32 in file, manifest says I32"});
  }
  SECTION("shape differs from the chunk's box") {
    Manifest m = fx.manifest;
    m.tensors.at("w").shape = {2, 8};
    m.tensors.at("w").chunks[0].box = Box{{0, 0}, {2, 8}};
    auto reader = CheckpointReader::from_manifest(fs(), fx.dir.path(), m);
    Bytes out(64);
    auto st = reader.read("w", Box{{0, 0}, {2, 8}}, out);
    REQUIRE_FALSE(st.ok());
    expect_names(st.error(), {fx.shard, "'w'", "shape [4,4] in file"});
  }
  SECTION("manifest that does not parse") {
    testing::write_bytes(fx.dir / "manifest.json", Bytes(3, std::byte{'{'}));
    auto reader = CheckpointReader::open(fs(), fx.dir.path());
    REQUIRE_FALSE(reader.ok());
    expect_names(reader.error(), {"manifest.json"});
  }
}

TEST_CASE("open() on paths that are not checkpoints", "[reader]") {
  shardguard::testing::TempDir dir;
  auto missing = CheckpointReader::open(fs(), dir / "nothing");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code() == ErrorCode::kNotFound);
  auto empty = CheckpointReader::open(fs(), dir.path());
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.error().code() == ErrorCode::kNotFound);
  CHECK_THAT(empty.error().message(), Catch::Contains("manifest.json"));
}

TEST_CASE("HF index text matches transformers' json.dumps(indent=2, sort_keys=True)", "[hf]") {
  Manifest m;
  m.tensors["b"] = {DType::kF32, {2}, {{"model-00002-of-00002.safetensors", "b", Box{{0}, {2}}}}};
  m.tensors["a.weight"] = {DType::kBF16,
                           {3, 2},
                           {{"model-00001-of-00002.safetensors", "a.weight", Box{{0, 0}, {3, 2}}}}};
  m.tensors["\xc3\xa9\"q"] = {DType::kU8, {}, {{"x.safetensors", "\xc3\xa9\"q", Box{}}}};
  CHECK(every_tensor_whole(m));
  CHECK(hf_index_json(m) ==
        "{\n"
        "  \"metadata\": {\n"
        "    \"total_size\": 21\n"
        "  },\n"
        "  \"weight_map\": {\n"
        "    \"a.weight\": \"model-00001-of-00002.safetensors\",\n"
        "    \"b\": \"model-00002-of-00002.safetensors\",\n"
        "    \"\\u00e9\\\"q\": \"x.safetensors\"\n"
        "  }\n"
        "}\n");
  CHECK(hf_index_json(Manifest{}) ==
        "{\n  \"metadata\": {\n    \"total_size\": 0\n  },\n  \"weight_map\": {}\n}\n");
  SECTION("escapes like ensure_ascii: astral planes as surrogate pairs, controls, DEL") {
    Manifest odd;
    const std::string name = "a\xf0\x9f\x98\x80\x01\x7f\\\n";
    odd.tensors[name] = {DType::kU8, {}, {{"f", name, Box{}}}};
    CHECK_THAT(hf_index_json(odd), Catch::Contains(R"("a\ud83d\ude00\u0001\u007f\\\n": "f")"));
  }
  SECTION("a split or renamed tensor is not whole") {
    m.tensors["b"].chunks[0].key = "b@0";
    CHECK_FALSE(every_tensor_whole(m));
    m.tensors["b"].chunks = {{"f", "b@0", Box{{0}, {1}}}, {"g", "b@1", Box{{1}, {1}}}};
    CHECK_FALSE(every_tensor_whole(m));
  }
}

TEST_CASE("Hugging Face directories read like checkpoints", "[hf]") {
  shardguard::testing::TempDir dir;
  Rng rng(21);
  std::vector<SyntheticTensor> tensors;
  for (int i = 0; i < 3; ++i) {
    tensors.push_back(testing::random_tensor("model.layers." + std::to_string(i), 1, rng));
  }
  SECTION("sharded, with an index") {
    Manifest m;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& t = tensors[i];
      const std::string file =
          i == 0 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
      m.tensors[t.name] = {t.dtype, t.shape, {{file, t.name, Box::whole(t.shape)}}};
    }
    testing::write_safetensors(
        dir / "model-00001-of-00002.safetensors",
        {{tensors[0].name, tensors[0].dtype, tensors[0].shape, tensors[0].global}});
    testing::write_safetensors(
        dir / "model-00002-of-00002.safetensors",
        {{tensors[1].name, tensors[1].dtype, tensors[1].shape, tensors[1].global},
         {tensors[2].name, tensors[2].dtype, tensors[2].shape, tensors[2].global}});
    shardguard::testing::spit(dir / "model.safetensors.index.json", hf_index_json(m));
    auto hf = manifest_from_hf_dir(fs(), dir.path());
    REQUIRE(hf.ok());
    CHECK(hf->world_size == 1);
    CHECK(hf->step == 0);
    CHECK(hf->files.size() == 2);
    CHECK(hf->files[0].xxh3_128.empty());
    CHECK(hf_index_json(*hf) == hf_index_json(m));
    auto reader = CheckpointReader::open(fs(), dir / "model.safetensors.index.json");
    REQUIRE(reader.ok());
    check_reads(*reader, tensors, rng);
    CHECK(reader->tensor_xxh3_64(tensors[2].name).value() == xxh64(tensors[2].global));

    SECTION("an index naming a tensor its file lacks") {
      m.tensors[tensors[0].name].chunks[0].file = "model-00002-of-00002.safetensors";
      shardguard::testing::spit(dir / "model.safetensors.index.json", hf_index_json(m));
      auto bad = manifest_from_hf_dir(fs(), dir.path());
      REQUIRE_FALSE(bad.ok());
      expect_names(bad.error(), {"model.safetensors.index.json", tensors[0].name});
    }
    SECTION("an index with an unsafe path") {
      shardguard::testing::spit(dir / "model.safetensors.index.json",
                                R"({"weight_map":{"a":"../a.safetensors"}})");
      auto bad = CheckpointReader::open(fs(), dir.path());
      REQUIRE_FALSE(bad.ok());
      expect_names(bad.error(), {"model.safetensors.index.json", "unsafe"});
    }
  }
  SECTION("a single model.safetensors") {
    std::vector<testing::ShardTensor> all;
    for (const auto& t : tensors) all.push_back({t.name, t.dtype, t.shape, t.global});
    testing::write_safetensors(dir / "model.safetensors", all);
    auto reader = CheckpointReader::open(fs(), dir.path());
    REQUIRE(reader.ok());
    CHECK(reader->manifest().files.size() == 1);
    check_reads(*reader, tensors, rng);
  }
}

}  // namespace
}  // namespace shardguard::checkpoint
