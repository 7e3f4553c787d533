// The shard writer and the commit protocol, against real files in a temp directory.
#include <catch2/catch.hpp>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <numeric>

#include "checkpoint/commit.h"
#include "checkpoint/paths.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/writer.h"
#include "core/fault_fs.h"
#include "tests/support/temp_dir.h"

using namespace shardguard;
using namespace shardguard::checkpoint;
using shardguard::testing::slurp;
using shardguard::testing::TempDir;
namespace fs = std::filesystem;

namespace {

std::vector<float> iota_floats(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::span<const std::byte> bytes_of(const std::vector<float>& v) {
  return std::as_bytes(std::span(v));
}

WriterOptions writer_options(const std::string& dir, uint32_t rank, uint32_t world,
                             uint64_t step = 100, uint64_t attempt = 0) {
  WriterOptions o;
  o.checkpoint_dir = dir;
  o.job_id = "job-a";
  o.step = step;
  o.attempt = attempt;
  o.rank = rank;
  o.world_size = world;
  o.io_threads = 2;
  o.block_size = 64 << 10;  // small blocks: several writes per file even in tests
  return o;
}

CommitOptions commit_options(const std::string& dir, uint32_t world, uint64_t step = 100,
                             uint64_t attempt = 0) {
  CommitOptions o;
  o.checkpoint_dir = dir;
  o.job_id = "job-a";
  o.step = step;
  o.attempt = attempt;
  o.world_size = world;
  o.timeout = std::chrono::seconds(5);
  return o;
}

// Rank r of `world` holds rows [r*rows/world, ...) of a [rows, cols] matrix "w" whose
// element (i, j) is i*cols+j, plus a whole bias "b" on rank 0.
Status write_rank(Filesystem& fsys, const std::string& dir, uint32_t rank, uint32_t world,
                  uint64_t step = 100, uint64_t attempt = 0, size_t rows = 64, size_t cols = 300) {
  ShardWriter w(fsys, writer_options(dir, rank, world, step, attempt));
  const size_t r0 = rank * rows / world, r1 = (rank + 1) * rows / world;
  auto rows_data = iota_floats((r1 - r0) * cols, float(r0 * cols));
  SG_RETURN_IF_ERROR(w.add_chunk("w", DType::kF32, {rows, cols}, Box{{r0, 0}, {r1 - r0, cols}},
                                 bytes_of(rows_data)));
  auto bias = iota_floats(cols, -1.0f);
  if (rank == 0) SG_RETURN_IF_ERROR(w.add_tensor("b", DType::kF32, {cols}, bytes_of(bias)));
  w.set_rank_state({"rng-bytes-" + std::to_string(rank), R"({"epoch":1,"index":42})", "null"});
  if (rank == 0) w.set_global_state({step, R"({"warmup":100})", R"({"note":"x"})"});
  auto s = w.finish();
  if (!s.ok()) return std::move(s).error();
  return {};
}

std::string file_xxh3(const std::string& path) {
  std::string data = slurp(path);
  auto h = XXH3_128bits(data.data(), data.size());
  return xxh3_128_hex(h.high64, h.low64);
}

size_t count_temp_files(const std::string& dir) {
  size_t n = 0;
  if (!fs::exists(dir)) return 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (is_temp_name(e.path().filename().string())) ++n;
  return n;
}

}  // namespace

TEST_CASE("Two ranks write, the committer seals a manifest that lists them", "[checkpoint]") {
  TempDir dir;
  auto& posix = PosixFilesystem::instance();
  REQUIRE(write_rank(posix, dir.path(), 1, 2).ok());
  // Not ready until rank 0 is there.
  auto early = try_commit_checkpoint(posix, RealClock::instance(), commit_options(dir.path(), 2));
  REQUIRE_FALSE(early.ok());
  CHECK(early.error().code() == ErrorCode::kNotFound);
  CHECK_THAT(early.error().message(), Catch::Contains("rank 0 (no sidecar)"));

  REQUIRE(write_rank(posix, dir.path(), 0, 2).ok());
  auto m = commit_checkpoint(posix, RealClock::instance(), commit_options(dir.path(), 2));
  REQUIRE(m.ok());
  const std::string step_dir = dir / "step-000000100";
  CHECK(fs::exists(step_dir + "/manifest.json"));
  CHECK_FALSE(fs::exists(step_dir + "/model.safetensors.index.json"));  // "w" is chunked
  REQUIRE(m->files.size() == 2);
  CHECK(m->world_size == 2);
  CHECK(m->tensors.at("w").chunks.size() == 2);
  CHECK(m->tensors.at("b").chunks.size() == 1);
  CHECK(m->ranks[1].rng == "rng-bytes-1");
  CHECK(m->ranks[0].data_position == R"({"epoch":1,"index":42})");
  CHECK(m->global.lr_schedule == R"({"warmup":100})");
  for (const auto& f : m->files) {
    CHECK(fs::file_size(step_dir + "/" + f.path) == f.size);
    CHECK(file_xxh3(step_dir + "/" + f.path) == f.xxh3_128);
  }
  // The manifest on disk parses back to the same thing.
  auto again = parse_manifest(slurp(step_dir + "/manifest.json"), "manifest.json");
  REQUIRE(again.ok());
  CHECK(again->tensors.at("w").chunks[1].box == m->tensors.at("w").chunks[1].box);
  CHECK(count_temp_files(dir.path()) == 0);
}

TEST_CASE("Shards are standard safetensors files with the bytes that were added",
          "[checkpoint]") {
  TempDir dir;
  auto& posix = PosixFilesystem::instance();
  REQUIRE(write_rank(posix, dir.path(), 0, 1).ok());
  const std::string shard = dir / "step-000000100/shard-00000-of-00001.safetensors";
  std::string data = slurp(shard);
  auto header = parse_safetensors(std::as_bytes(std::span(data.data(), data.size())), shard);
  REQUIRE(header.ok());
  CHECK(header->data_start % 4096 == 0);
  const TensorEntry* w = header->find("w");
  REQUIRE(w != nullptr);
  CHECK(w->shape == std::vector<uint64_t>{64, 300});
  std::vector<float> back(64 * 300);
  std::memcpy(back.data(), data.data() + header->file_offset(*w), back.size() * 4);
  CHECK(back == iota_floats(64 * 300, 0));
  CHECK(header->metadata.at("format") == "shardguard");
}

TEST_CASE("Every tensor whole in one file: an HF index is written", "[checkpoint]") {
  TempDir dir;
  auto& posix = PosixFilesystem::instance();
  ShardWriter w(posix, writer_options(dir.path(), 0, 1));
  auto v = iota_floats(10, 0);
  REQUIRE(w.add_tensor("layer.weight", DType::kF32, {2, 5}, bytes_of(v)).ok());
  w.set_global_state({100, "null", "null"});
  REQUIRE(w.finish().ok());
  REQUIRE(commit_checkpoint(posix, RealClock::instance(), commit_options(dir.path(), 1)).ok());
  std::string index = slurp(dir / "step-000000100/model.safetensors.index.json");
  CHECK_THAT(index, Catch::Contains("\"layer.weight\": \"shard-00000-of-00001.safetensors\""));
  CHECK_THAT(index, Catch::Contains("\"total_size\": 40"));
}

TEST_CASE("Writer input errors are refused with the tensor named", "[checkpoint]") {
  TempDir dir;
  ShardWriter w(PosixFilesystem::instance(), writer_options(dir.path(), 0, 1));
  auto v = iota_floats(4, 0);
  auto wrong_size = w.add_tensor("a", DType::kF32, {5}, bytes_of(v));
  REQUIRE_FALSE(wrong_size.ok());
  CHECK_THAT(wrong_size.error().message(), Catch::Contains("'a'"));
  CHECK_THAT(wrong_size.error().message(), Catch::Contains("needs 20 bytes, got 16"));
  REQUIRE(w.add_chunk("c", DType::kF32, {8}, Box{{0}, {4}}, bytes_of(v)).ok());
  auto overlap = w.add_chunk("c", DType::kF32, {8}, Box{{2}, {4}}, bytes_of(v));
  REQUIRE_FALSE(overlap.ok());
  CHECK_THAT(overlap.error().message(), Catch::Contains("overlaps"));
  auto outside = w.add_chunk("d", DType::kF32, {8}, Box{{6}, {4}}, bytes_of(v));
  REQUIRE_FALSE(outside.ok());
  CHECK_THAT(outside.error().message(), Catch::Contains("exceeds"));
  w.set_rank_state({"", "{not json", "null"});
  w.set_global_state({1, "null", "null"});
  auto bad_json = w.finish();
  REQUIRE_FALSE(bad_json.ok());
  CHECK_THAT(bad_json.error().message(), Catch::Contains("data loader position"));
}

TEST_CASE("Commit waits, then times out naming the missing ranks", "[checkpoint]") {
  TempDir dir;
  auto& posix = PosixFilesystem::instance();
  REQUIRE(write_rank(posix, dir.path(), 0, 3).ok());
  FakeClock clock;
  auto opts = commit_options(dir.path(), 3);
  opts.timeout = std::chrono::seconds(30);
  int sleeps = 0;
  auto r = commit_checkpoint(posix, clock, opts, [&](Duration d) {
    ++sleeps;
    clock.advance(d);
  });
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == ErrorCode::kTimeout);
  CHECK_THAT(r.error().message(), Catch::Contains("rank 1 (no sidecar), rank 2 (no sidecar)"));
  CHECK(sleeps == 1500);  // 30 s in 20 ms polls
  CHECK_FALSE(fs::exists(dir / "step-000000100/manifest.json"));
}

TEST_CASE("Fencing: stale attempts can neither publish nor commit", "[checkpoint]") {
  TempDir dir;
  auto& posix = PosixFilesystem::instance();
  auto& clock = RealClock::instance();

  SECTION("a committed step is never rewritten, and committing again is idempotent") {
    REQUIRE(write_rank(posix, dir.path(), 0, 1).ok());
    auto first = commit_checkpoint(posix, clock, commit_options(dir.path(), 1));
    REQUIRE(first.ok());
    const std::string before = slurp(dir / "step-000000100/manifest.json");
    auto again = commit_checkpoint(posix, clock, commit_options(dir.path(), 1));
    REQUIRE(again.ok());
    CHECK(slurp(dir / "step-000000100/manifest.json") == before);
    auto rewrite = write_rank(posix, dir.path(), 0, 1, 100, 1);
    REQUIRE_FALSE(rewrite.ok());
    CHECK(rewrite.error().code() == ErrorCode::kFenced);
  }

  SECTION("a zombie rank of an older attempt is refused after a newer one wrote") {
    REQUIRE(write_rank(posix, dir.path(), 0, 1, 100, /*attempt=*/2).ok());
    auto zombie = write_rank(posix, dir.path(), 0, 1, 100, /*attempt=*/1);
    REQUIRE_FALSE(zombie.ok());
    CHECK(zombie.error().code() == ErrorCode::kFenced);
    auto old_committer = try_commit_checkpoint(posix, clock, commit_options(dir.path(), 1, 100, 1));
    REQUIRE_FALSE(old_committer.ok());
    CHECK(old_committer.error().code() == ErrorCode::kFenced);
  }

  SECTION("a newer attempt takes over an incomplete step and removes stale files") {
    // Attempt 0 ran with 3 ranks and died before committing.
    REQUIRE(write_rank(posix, dir.path(), 0, 3, 100, 0).ok());
    REQUIRE(write_rank(posix, dir.path(), 2, 3, 100, 0).ok());
    testing::spit(dir / "step-000000100/shard-00001-of-00003.safetensors.tmp.a0.999", "partial");
    // Attempt 1 runs with 2 ranks.
    REQUIRE(write_rank(posix, dir.path(), 0, 2, 100, 1).ok());
    auto waiting = try_commit_checkpoint(posix, clock, commit_options(dir.path(), 2, 100, 1));
    REQUIRE_FALSE(waiting.ok());
    REQUIRE(write_rank(posix, dir.path(), 1, 2, 100, 1).ok());
    auto m = commit_checkpoint(posix, clock, commit_options(dir.path(), 2, 100, 1));
    REQUIRE(m.ok());
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir / "step-000000100"))
      names.insert(e.path().filename().string());
    CHECK(names == std::set<std::string>{"manifest.json", "rank-00000.json", "rank-00001.json",
                                         "shard-00000-of-00002.safetensors",
                                         "shard-00001-of-00002.safetensors"});
  }
}

TEST_CASE("A full disk during save fails cleanly and keeps the previous checkpoint",
          "[checkpoint][fault]") {
  TempDir dir;
  auto& posix = PosixFilesystem::instance();
  auto& clock = RealClock::instance();
  REQUIRE(write_rank(posix, dir.path(), 0, 1, 100).ok());
  REQUIRE(commit_checkpoint(posix, clock, commit_options(dir.path(), 1, 100)).ok());
  const std::string committed = slurp(dir / "step-000000100/shard-00000-of-00001.safetensors");

  // Count the operations of a whole save + commit, then fail each one in turn.
  int total = 0;
  {
    TempDir probe;
    FaultInjectingFilesystem counting(posix);
    REQUIRE(write_rank(counting, probe.path(), 0, 1, 200).ok());
    REQUIRE(commit_checkpoint(counting, clock, commit_options(probe.path(), 1, 200)).ok());
    total = counting.operations();
  }
  REQUIRE(total > 8);
  for (int n = 1; n <= total; ++n) {
    FaultInjectingFilesystem faulty(posix);
    faulty.fail_nth_operation(n, ENOSPC, /*sticky=*/true);
    auto st = write_rank(faulty, dir.path(), 0, 1, 200);
    Result<Manifest> m = Error(ErrorCode::kInternal, "not reached");
    if (st.ok()) m = commit_checkpoint(faulty, clock, commit_options(dir.path(), 1, 200));
    INFO("failing operation " << n << " of " << total);
    CHECK_FALSE((st.ok() && m.ok()));
    const auto& err = st.ok() ? m.error() : st.error();
    CHECK(err.code() == ErrorCode::kNoSpace);
    CHECK(count_temp_files(dir / "step-000000200") == 0);
    CHECK(slurp(dir / "step-000000100/shard-00000-of-00001.safetensors") == committed);
    fs::remove_all(dir / "step-000000200");
  }
}

TEST_CASE("Async save: the caller may change its tensors right after start()",
          "[checkpoint]") {
  TempDir dir;
  auto& posix = PosixFilesystem::instance();
  AsyncShardWriter async;
  CHECK_FALSE(async.wait().ok());  // nothing started
  for (uint64_t step : {10, 20}) {
    auto weights = iota_floats(1 << 18, float(step));
    ShardWriter w(posix, writer_options(dir.path(), 0, 1, step));
    REQUIRE(w.add_tensor("w", DType::kF32, {1 << 18}, bytes_of(weights)).ok());
    w.set_global_state({step, "null", "null"});
    auto stall = async.start(std::move(w));
    REQUIRE(stall.ok());
    std::fill(weights.begin(), weights.end(), -7.0f);  // training goes on
    auto sidecar = async.wait();
    REQUIRE(sidecar.ok());
    REQUIRE(commit_checkpoint(posix, RealClock::instance(), commit_options(dir.path(), 1, step)).ok());
    std::string data = slurp(dir / (step_dir_name(step) + "/shard-00000-of-00001.safetensors"));
    auto header = parse_safetensors(std::as_bytes(std::span(data.data(), data.size())), "shard");
    REQUIRE(header.ok());
    std::vector<float> back(1 << 18);
    std::memcpy(back.data(), data.data() + header->file_offset(*header->find("w")), back.size() * 4);
    CHECK(back == iota_floats(1 << 18, float(step)));
  }
}
