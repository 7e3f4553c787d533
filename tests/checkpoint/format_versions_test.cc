// Format versions side by side (issue 17, "Format v2"): a format-1 checkpoint written by the
// released writer (tests/checkpoint/fixtures/v1, committed) still lists, verifies and loads,
// with each file hashed whole before its first use; a format-2 checkpoint's sidecars and
// manifest carry block sums that match the file; a manifest of a newer format is "newer"
// in the catalog, skipped by resume with that reason, never "corrupt"; full verification
// names the bad block.
#include <catch2/catch.hpp>
#include <filesystem>

#include "checkpoint/block_sums.h"
#include "checkpoint/catalog.h"
#include "checkpoint/paths.h"
#include "checkpoint/reader.h"
#include "checkpoint/retention.h"
#include "checkpoint/verify.h"
#include "core/clock.h"
#include "tests/checkpoint/step_fixture.h"
#include "tests/checkpoint/tensor_fixtures.h"
#include "tests/support/temp_dir.h"

namespace shardguard::checkpoint {
namespace {

using testing::Bytes;

Filesystem& fs() { return PosixFilesystem::instance(); }

std::string error_of(const Status& st) { return st.ok() ? "ok" : st.error().message(); }

void flip_byte(const std::string& path, uint64_t offset) {
  Bytes b = testing::read_bytes(path);
  REQUIRE(offset < b.size());
  b[offset] ^= std::byte{0x01};
  testing::write_bytes(path, b);
}

// A copy of the committed format-1 checkpoint (2 ranks, step 5, "w" F32 [8, 16] by rows
// and "count"; step_fixture.h's contents) in `dir`; returns its step directory.
std::string copy_v1_fixture(const std::string& dir) {
  const std::string from = std::string(SG_V1_FIXTURE) + "/step-000000005";
  const std::string to = dir + "/step-000000005";
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive);
  return to;
}

const shardguard::testing::StepShape kV1Shape{8, 16};

TEST_CASE("a format-1 checkpoint lists, verifies and loads", "[format][v1]") {
  shardguard::testing::TempDir dir;
  const std::string step_dir = copy_v1_fixture(dir.path());
  auto text = fs().read_file(step_dir + "/manifest.json");
  REQUIRE(text.ok());
  REQUIRE_THAT(*text, Catch::Contains(R"("version":1,)"));
  for (Verify v : {Verify::kSize, Verify::kChecksum}) {
    auto latest = latest_complete(fs(), dir.path(), v);
    REQUIRE(latest.ok());
    CHECK(latest->step == 5);
    CHECK(latest->manifest->version == 1);
    CHECK_FALSE(latest->manifest->files[0].has_block_sums());
  }
  CHECK(error_of(shardguard::testing::check_step(fs(), step_dir, 5, kV1Shape)) == "ok");
  auto sidecar = parse_sidecar(*fs().read_file(step_dir + "/rank-00001.json"), "rank-00001.json");
  REQUIRE(sidecar.ok());
  CHECK(sidecar->version == 1);
}

TEST_CASE("a format-1 file is hashed whole before its first use", "[format][v1]") {
  shardguard::testing::TempDir dir;
  const std::string step_dir = copy_v1_fixture(dir.path());
  const std::string shard = step_dir + "/shard-00001-of-00002.safetensors";
  flip_byte(shard, std::filesystem::file_size(shard) - 3);  // in "w", rank 1's rows
  auto reader = CheckpointReader::open(fs(), step_dir);
  REQUIRE(reader.ok());
  // Rank 0's file is intact: its tensor and its rows load.
  CHECK(reader->read_whole("count").ok());
  Bytes rows(4 * 16 * 4);
  CHECK(error_of(reader->read("w", Box{{0, 0}, {4, 16}}, rows)) == "ok");
  // Any read of rank 1's file fails, even of bytes far from the flip: the file is checked
  // whole.
  Bytes row(16 * 4);
  auto st = reader->read("w", Box{{4, 0}, {1, 16}}, row);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code() == ErrorCode::kCorrupt);
  CHECK_THAT(st.error().message(),
             Catch::Contains("step-000000005/shard-00001-of-00002.safetensors: checksum ") &&
                 Catch::Contains(" differs from manifest a0938fa3e456abb17b3d85e3e624ea7c"));
  auto failure = reader->checksum_failure();
  REQUIRE(failure.has_value());
  CHECK(failure->file == "shard-00001-of-00002.safetensors");
  CHECK(failure->manifest == step_dir + "/manifest.json");
  CHECK_FALSE(failure->offset.has_value());
}

TEST_CASE("format-2 block sums in sidecar and manifest match the written file",
          "[format][writer]") {
  shardguard::testing::TempDir dir;
  FakeClock clock;
  const shardguard::testing::StepShape shape{300, 4096};  // 4.7 MiB: 3 blocks, one partial
  REQUIRE(shardguard::testing::write_step(fs(), clock, dir.path(), 9, 1, shape).ok());
  const std::string step_dir = dir / "step-000000009";
  auto sidecar = parse_sidecar(*fs().read_file(step_dir + "/rank-00000.json"), "rank-00000.json");
  REQUIRE(sidecar.ok());
  auto manifest = parse_manifest(*fs().read_file(step_dir + "/manifest.json"), "manifest.json");
  REQUIRE(manifest.ok());
  CHECK(sidecar->version == 2);
  CHECK(manifest->version == 2);
  const FileRecord& rec = manifest->files.at(0);
  CHECK(rec.block_bytes == kDefaultChecksumBlockBytes);
  CHECK(rec.block_xxh3.size() == 3);
  // Recomputed from the file on disk, independently of the writer's pass.
  const Bytes bytes = testing::read_bytes(step_dir + "/" + rec.path);
  REQUIRE(bytes.size() == rec.size);
  for (size_t k = 0; k < rec.block_xxh3.size(); ++k) {
    const size_t begin = k * rec.block_bytes;
    const size_t n = std::min<size_t>(rec.block_bytes, bytes.size() - begin);
    CHECK(block_xxh3_64(std::span(bytes).subspan(begin, n)) == rec.block_xxh3[k]);
  }
  CHECK(sidecar->file.block_xxh3 == rec.block_xxh3);
  CHECK(file_checksums(fs(), step_dir + "/" + rec.path, rec.block_bytes)->block_xxh3 ==
        rec.block_xxh3);
}

TEST_CASE("the writer refuses a checksum block size the format does not allow",
          "[format][writer]") {
  shardguard::testing::TempDir dir;
  const uint64_t bad =
      GENERATE(uint64_t{0}, uint64_t{2048}, uint64_t{3} << 20, uint64_t{128} << 20);
  WriterOptions o;
  o.checkpoint_dir = dir.path();
  o.checksum_block_bytes = bad;
  ShardWriter writer(fs(), o);
  const Bytes data(16);
  REQUIRE(writer.add_tensor("x", DType::kF32, {4}, data).ok());
  writer.set_global_state({0, "null", "null"});
  auto st = writer.finish();
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code() == ErrorCode::kInvalid);
  CHECK_THAT(st.error().message(), Catch::Contains("power of two"));
}

// Rewrites the manifest of `step_dir` as a future shardguard might: version 3, a field this
// build does not know.
void make_newer(const std::string& step_dir) {
  std::string text = *fs().read_file(step_dir + "/manifest.json");
  const std::string from = R"("version":2,)";
  REQUIRE(text.find(from) != std::string::npos);
  text.replace(text.find(from), from.size(), R"("version":3,"lease":{"holder":"x"},)");
  shardguard::testing::spit(step_dir + "/manifest.json", text);
}

TEST_CASE("a manifest of a newer format is 'newer', skipped by resume, kept by gc",
          "[format][catalog]") {
  shardguard::testing::TempDir dir;
  FakeClock clock;
  for (uint64_t step : {100, 200, 300})
    REQUIRE(shardguard::testing::write_step(fs(), clock, dir.path(), step, 2, {8, 16}).ok());
  make_newer(dir / "step-000000300");
  make_newer(dir / "step-000000100");
  const std::string why =
      "step-000000300/manifest.json: written by a newer shardguard (format 3; this build "
      "reads up to 2)";

  auto list = list_checkpoints(fs(), dir.path(), Verify::kChecksum);
  REQUIRE(list.ok());
  REQUIRE(list->size() == 3);
  CHECK((*list)[0].state == CheckpointState::kNewer);
  CHECK(checkpoint_state_name((*list)[0].state) == "newer");
  CHECK((*list)[0].reason == why);
  CHECK_FALSE((*list)[0].manifest.has_value());
  CHECK((*list)[1].state == CheckpointState::kComplete);

  std::vector<CatalogEntry> skipped;
  auto latest = latest_complete(fs(), dir.path(), Verify::kSize, &skipped);
  REQUIRE(latest.ok());
  CHECK(latest->step == 200);
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0].reason == why);

  auto reader = CheckpointReader::open(fs(), dir / "step-000000300");
  REQUIRE_FALSE(reader.ok());
  CHECK(reader.error().code() == ErrorCode::kUnsupported);
  CHECK_THAT(reader.error().message(), Catch::Contains("written by a newer shardguard"));

  // Retention does not remove what it cannot read as corrupt: step 100 is older than the
  // newest complete one, yet kept.
  auto plan = plan_retention(*list, RetentionPolicy{1, 0, {}});
  REQUIRE(plan.size() == 3);
  CHECK_FALSE(plan[2].remove);
  CHECK_THAT(plan[2].why, Catch::Contains("newer"));
}

TEST_CASE("full verification names the bad block; size verification cannot see it",
          "[format][verify]") {
  shardguard::testing::TempDir dir;
  FakeClock clock;
  const shardguard::testing::StepShape shape{300, 4096};  // 2.3 MiB a rank: two blocks
  REQUIRE(shardguard::testing::write_step(fs(), clock, dir.path(), 11, 2, shape).ok());
  const std::string step_dir = dir / "step-000000011";
  const std::string shard = step_dir + "/shard-00001-of-00002.safetensors";
  const uint64_t offset = GENERATE(uint64_t{5000}, uint64_t{(2 << 20) + 17});
  flip_byte(shard, offset);
  const uint64_t block = offset / kDefaultChecksumBlockBytes * kDefaultChecksumBlockBytes;
  auto m = parse_manifest(*fs().read_file(step_dir + "/manifest.json"), "manifest.json");
  REQUIRE(m.ok());
  CHECK(verify_checkpoint(fs(), step_dir, *m, Verify::kSize).ok());
  ChecksumFailure failure;
  auto st = verify_checkpoint(fs(), step_dir, *m, Verify::kChecksum, {}, &failure);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code() == ErrorCode::kCorrupt);
  CHECK(st.error().message() ==
        "step-000000011/shard-00001-of-00002.safetensors: block at offset " +
            std::to_string(block) + " (2 MiB) fails its checksum");
  CHECK(failure == ChecksumFailure{step_dir + "/manifest.json", "shard-00001-of-00002.safetensors",
                                   block, kDefaultChecksumBlockBytes});
  CHECK(inspect_checkpoint(fs(), step_dir, 11, Verify::kChecksum).state ==
        CheckpointState::kCorrupt);
}

TEST_CASE("a format-2 file without block sums is hashed whole, like format 1", "[format][v1]") {
  // Written by a committer that got a format-1 sidecar from an older rank binary.
  shardguard::testing::TempDir dir;
  testing::Rng rng(3);
  testing::SyntheticTensor t{"w", DType::kF32, {8, 4}, testing::random_bytes(128, rng), {}};
  t.chunks = testing::split_along(t.shape, 0, 2, rng);
  const std::string step_dir = dir / "step-000000001";
  testing::write_synthetic_checkpoint(step_dir, 1, 2, {t}, true, /*block_bytes=*/0);
  auto reader = CheckpointReader::open(fs(), step_dir);
  REQUIRE(reader.ok());
  CHECK(reader->read_whole("w").value_or(Bytes{}) == t.global);
  flip_byte(step_dir + "/shard-00000-of-00002.safetensors", 2);  // the header length
  auto fresh = CheckpointReader::open(fs(), step_dir);
  REQUIRE(fresh.ok());
  auto w = fresh->read_whole("w");
  REQUIRE_FALSE(w.ok());
  CHECK_THAT(w.error().message(), Catch::Contains("shard-00000-of-00002.safetensors: checksum"));
}

TEST_CASE("verify_whole_files hashes format-2 files whole too, and finds the block",
          "[format][reader]") {
  shardguard::testing::TempDir dir;
  FakeClock clock;
  REQUIRE(shardguard::testing::write_step(fs(), clock, dir.path(), 12, 1, {300, 4096}).ok());
  const std::string step_dir = dir / "step-000000012";
  flip_byte(step_dir + "/shard-00000-of-00001.safetensors", (4 << 20) + 1);
  auto reader = CheckpointReader::open(fs(), step_dir, ReaderOptions{.verify_whole_files = true});
  REQUIRE(reader.ok());
  // "count" is in the first block, far from the flip: the whole-file check still stops it.
  auto count = reader->read_whole("count");
  REQUIRE_FALSE(count.ok());
  CHECK_THAT(count.error().message(), Catch::Contains("block at offset 4194304 (2 MiB)"));
  // Without the option, the intact first block reads.
  auto plain = CheckpointReader::open(fs(), step_dir);
  REQUIRE(plain.ok());
  CHECK(plain->read_whole("count").ok());
}

}  // namespace
}  // namespace shardguard::checkpoint
