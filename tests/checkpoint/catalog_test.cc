// Tests for checkpoint/catalog.h and checkpoint/verify.h: complete, incomplete and corrupt
// step directories, newest first; latest_complete() falls back past a corrupt one (a
// flipped byte only a checksum finds: the block sum of format 2 names its block) and an
// incomplete newer one, saying why.
#include "checkpoint/catalog.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/checkpoint/tensor_fixtures.h"
#include "tests/support/temp_dir.h"

namespace shardguard::checkpoint {
namespace {

using testing::Bytes;
using testing::Rng;

Filesystem& fs() { return PosixFilesystem::instance(); }

// Writes a two-rank checkpoint of one split tensor at `step` (committed unless told).
Manifest write_step(const std::string& checkpoint_dir, uint64_t step, bool commit = true) {
  Rng rng(step);
  testing::SyntheticTensor t{"w", DType::kF32, {8, 4}, testing::random_bytes(128, rng), {}};
  t.chunks = testing::split_along(t.shape, 0, 2, rng);
  return testing::write_synthetic_checkpoint(checkpoint_dir + "/" + step_dir_name(step), step, 2,
                                             {t}, commit);
}

std::string shard_path(const std::string& checkpoint_dir, uint64_t step, uint32_t rank) {
  return checkpoint_dir + "/" + step_dir_name(step) + "/" + shard_file_name(rank, 2);
}

void flip_last_byte(const std::string& path) {
  Bytes b = testing::read_bytes(path);
  b.back() ^= std::byte{0x01};
  testing::write_bytes(path, b);
}

std::vector<uint64_t> steps_of(const std::vector<CatalogEntry>& entries) {
  std::vector<uint64_t> out;
  for (const auto& e : entries) out.push_back(e.step);
  return out;
}

TEST_CASE("catalog classifies and falls back", "[catalog]") {
  shardguard::testing::TempDir dir;
  write_step(dir.path(), 100);
  write_step(dir.path(), 200);
  write_step(dir.path(), 300);
  flip_last_byte(shard_path(dir.path(), 300, 1));  // same size: only a checksum sees it
  write_step(dir.path(), 400, /*commit=*/false);
  // Names that are not ours are ignored.
  std::filesystem::create_directories(dir / "step-12");
  std::filesystem::create_directories(dir / "tmp");
  shardguard::testing::spit(dir / "step-000000500", "a file, not a directory");

  SECTION("size verification cannot see the flipped byte") {
    auto list = list_checkpoints(fs(), dir.path(), Verify::kSize);
    REQUIRE(list.ok());
    CHECK(steps_of(*list) == std::vector<uint64_t>{400, 300, 200, 100});
    CHECK((*list)[0].state == CheckpointState::kIncomplete);
    CHECK_THAT((*list)[0].reason, Catch::Contains("step-000000400: no manifest.json"));
    CHECK_FALSE((*list)[0].manifest.has_value());
    CHECK((*list)[1].state == CheckpointState::kComplete);
    CHECK((*list)[1].reason.empty());
    CHECK((*list)[1].manifest->step == 300);
    CHECK((*list)[1].dir == dir / "step-000000300");
    auto latest = latest_complete(fs(), dir.path(), Verify::kSize);
    REQUIRE(latest.ok());
    CHECK(latest->step == 300);
  }
  SECTION("checksum verification finds it and falls back to 200") {
    auto list = list_checkpoints(fs(), dir.path(), Verify::kChecksum);
    REQUIRE(list.ok());
    REQUIRE(list->size() == 4);
    const CatalogEntry& corrupt = (*list)[1];
    CHECK(corrupt.state == CheckpointState::kCorrupt);
    CHECK(corrupt.reason ==
          "step-000000300/shard-00001-of-00002.safetensors: block at offset 0 (2 MiB) fails "
          "its checksum");
    CHECK(corrupt.manifest.has_value());
    CHECK((*list)[2].state == CheckpointState::kComplete);
    CHECK((*list)[3].state == CheckpointState::kComplete);

    std::vector<CatalogEntry> skipped;
    auto latest = latest_complete(fs(), dir.path(), Verify::kChecksum, &skipped);
    REQUIRE(latest.ok());
    CHECK(latest->step == 200);
    CHECK(latest->state == CheckpointState::kComplete);
    CHECK(steps_of(skipped) == std::vector<uint64_t>{400, 300});
    CHECK(skipped[0].state == CheckpointState::kIncomplete);
    CHECK(skipped[1].state == CheckpointState::kCorrupt);
  }
  SECTION("nothing complete is kNotFound saying why") {
    std::filesystem::remove(dir / "step-000000200/manifest.json");
    std::filesystem::remove(shard_path(dir.path(), 100, 0));
    auto latest = latest_complete(fs(), dir.path(), Verify::kChecksum);
    REQUIRE_FALSE(latest.ok());
    INFO(latest.error().message());
    CHECK(latest.error().code() == ErrorCode::kNotFound);
    CHECK_THAT(latest.error().message(),
               Catch::Contains("step-000000300/shard-00001-of-00002.safetensors: block at"));
    CHECK_THAT(latest.error().message(),
               Catch::Contains("step-000000100/shard-00000-of-00002.safetensors: missing"));
  }
}

TEST_CASE("each way a checkpoint is corrupt names the file", "[catalog]") {
  shardguard::testing::TempDir dir;
  Manifest m = write_step(dir.path(), 700);
  const std::string step_dir = dir / "step-000000700";
  auto inspect = [&](Verify v) { return inspect_checkpoint(fs(), step_dir, 700, v); };
  REQUIRE(inspect(Verify::kChecksum).state == CheckpointState::kComplete);

  const std::string shard0 = shard_path(dir.path(), 700, 0);
  const std::string manifest_path = step_dir + "/manifest.json";
  std::string reason;
  switch (GENERATE(0, 1, 2, 3)) {
    case 0:  // manifest truncated
      shardguard::testing::spit(manifest_path,
                                shardguard::testing::slurp(manifest_path).substr(0, 40));
      reason = "step-000000700/manifest.json: ";
      break;
    case 1: {  // manifest of another step
      Manifest other = m;
      other.step = 699;
      shardguard::testing::spit(manifest_path, manifest_to_json(other));
      reason = "step-000000700/manifest.json: step 699 differs from the directory's 700";
      break;
    }
    case 2:
      std::filesystem::remove(shard0);
      reason = "step-000000700/shard-00000-of-00002.safetensors: missing";
      break;
    default:
      std::filesystem::resize_file(shard0, 10);
      reason = "step-000000700/shard-00000-of-00002.safetensors: size 10 differs from manifest";
  }
  for (Verify v : {Verify::kSize, Verify::kChecksum}) {
    CatalogEntry e = inspect(v);
    CHECK(e.state == CheckpointState::kCorrupt);
    CHECK_THAT(e.reason, Catch::StartsWith(reason));
  }
}

TEST_CASE("verify_checkpoint reports progress in bytes", "[catalog]") {
  shardguard::testing::TempDir dir;
  Manifest m = write_step(dir.path(), 10);
  for (Verify v : {Verify::kSize, Verify::kChecksum}) {
    uint64_t last_done = 0, last_total = 0;
    int calls = 0;
    auto st = verify_checkpoint(fs(), dir / "step-000000010", m, v, [&](uint64_t d, uint64_t t) {
      CHECK(d >= last_done);
      last_done = d;
      last_total = t;
      ++calls;
    });
    REQUIRE(st.ok());
    CHECK(calls >= 2);
    CHECK(last_done == m.total_bytes());
    CHECK(last_total == m.total_bytes());
  }
  auto sum = file_xxh3_128(fs(), shard_path(dir.path(), 10, 0));
  REQUIRE(sum.ok());
  CHECK(*sum == m.files[0].xxh3_128);
  CHECK(sum->size() == 32);
}

TEST_CASE("a missing checkpoint directory is an empty catalog", "[catalog]") {
  shardguard::testing::TempDir dir;
  auto list = list_checkpoints(fs(), dir / "absent", Verify::kChecksum);
  REQUIRE(list.ok());
  CHECK(list->empty());
  auto latest = latest_complete(fs(), dir / "absent", Verify::kSize);
  REQUIRE_FALSE(latest.ok());
  CHECK(latest.error().code() == ErrorCode::kNotFound);
}

}  // namespace
}  // namespace shardguard::checkpoint
