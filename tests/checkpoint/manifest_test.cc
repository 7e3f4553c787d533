// Tests for checkpoint/manifest.h: manifests and sidecars round-trip through JSON (format 2
// with block sums, and format 1), the strict reader rejects every malformed manifest with a
// message naming the field, and a newer format is kUnsupported ("newer"), not corrupt.
#include "checkpoint/manifest.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <functional>

namespace shardguard::checkpoint {
namespace {
namespace json = boost::json;

Box B(std::vector<uint64_t> offsets, std::vector<uint64_t> sizes) {
  return Box{std::move(offsets), std::move(sizes)};
}

// Two ranks: "w" [4,6] split by rows across both files, "b" [6] whole in rank 0's file,
// and a scalar "s" in rank 1's file.
Manifest sample_manifest() {
  Manifest m;
  m.job_id = "job-7";
  m.step = 1200;
  m.attempt = 3;
  m.reason = SaveReason::kEmergency;
  m.world_size = 2;
  m.created_unix_ms = 1700000000123;
  // File 0 with block sums (two 4 KiB blocks, the last one partial), file 1 without.
  m.files = {{"shard-00000-of-00002.safetensors",
              6000,
              std::string(32, 'a'),
              0,
              4096,
              {0x0123456789abcdefull, 0xfedcba9876543210ull}},
             {"shard-00001-of-00002.safetensors", 2048, "0123456789abcdef0123456789abcdef", 1}};
  m.tensors["w"] = {DType::kBF16,
                    {4, 6},
                    {{"shard-00000-of-00002.safetensors", "w@0,0", B({0, 0}, {2, 6})},
                     {"shard-00001-of-00002.safetensors", "w@2,0", B({2, 0}, {2, 6})}}};
  m.tensors["b"] = {DType::kF32, {6}, {{"shard-00000-of-00002.safetensors", "b", B({0}, {6})}}};
  m.tensors["s"] = {DType::kI64, {}, {{"shard-00001-of-00002.safetensors", "s", B({}, {})}}};
  m.ranks = {{std::string("\x00\x01\xff", 3), R"({"epoch":1,"index":17})", "null"},
             {"seed", "null", R"({"k":[1,2]})"}};
  // Integers only: Boost.JSON re-renders doubles (0.001 -> 1E-3), equal in value.
  m.global = {1200, R"({"lr_milli":1,"warmup":[0,100]})", R"({"note":"x"})"};
  return m;
}

void expect_same(const Manifest& a, const Manifest& b) {
  CHECK(a.version == b.version);
  CHECK(a.job_id == b.job_id);
  CHECK(a.step == b.step);
  CHECK(a.attempt == b.attempt);
  CHECK(a.reason == b.reason);
  CHECK(a.world_size == b.world_size);
  CHECK(a.created_unix_ms == b.created_unix_ms);
  REQUIRE(a.files.size() == b.files.size());
  for (size_t i = 0; i < a.files.size(); ++i) {
    CHECK(a.files[i].path == b.files[i].path);
    CHECK(a.files[i].size == b.files[i].size);
    CHECK(a.files[i].xxh3_128 == b.files[i].xxh3_128);
    CHECK(a.files[i].rank == b.files[i].rank);
    CHECK(a.files[i].block_bytes == b.files[i].block_bytes);
    CHECK(a.files[i].block_xxh3 == b.files[i].block_xxh3);
  }
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (const auto& [name, t] : a.tensors) {
    const TensorRecord& u = b.tensors.at(name);
    CHECK(t.dtype == u.dtype);
    CHECK(t.shape == u.shape);
    REQUIRE(t.chunks.size() == u.chunks.size());
    for (size_t i = 0; i < t.chunks.size(); ++i) {
      CHECK(t.chunks[i].file == u.chunks[i].file);
      CHECK(t.chunks[i].key == u.chunks[i].key);
      CHECK(t.chunks[i].box == u.chunks[i].box);
    }
  }
  REQUIRE(a.ranks.size() == b.ranks.size());
  for (size_t i = 0; i < a.ranks.size(); ++i) {
    CHECK(a.ranks[i].rng == b.ranks[i].rng);
    CHECK(a.ranks[i].data_position == b.ranks[i].data_position);
    CHECK(a.ranks[i].user == b.ranks[i].user);
  }
  CHECK(a.global.step == b.global.step);
  CHECK(a.global.lr_schedule == b.global.lr_schedule);
  CHECK(a.global.user == b.global.user);
}

TEST_CASE("manifest round trip", "[manifest]") {
  const Manifest m = sample_manifest();
  const std::string text = manifest_to_json(m);
  auto parsed = parse_manifest(text, "manifest.json");
  REQUIRE(parsed.ok());
  expect_same(m, *parsed);
  CHECK(manifest_to_json(*parsed) == text);
  CHECK(parsed->version == 2);
  CHECK_THAT(text,
             Catch::Contains(
                 R"("block_bytes":4096,"block_xxh3":["0123456789abcdef","fedcba9876543210"])"));
  CHECK(parsed->total_bytes() == 6000 + 2048);
  CHECK(parsed->find_file("shard-00001-of-00002.safetensors")->rank == 1);
  CHECK(parsed->find_file("nope") == nullptr);
}

TEST_CASE("sidecar round trip", "[manifest]") {
  Sidecar s;
  s.job_id = "job-7";
  s.step = 1200;
  s.attempt = 3;
  s.rank = 1;
  s.world_size = 2;
  s.file = {"shard-00001-of-00002.safetensors", 2048, std::string(32, 'f'), 1};
  s.tensors["w"] = {DType::kBF16, {4, 6}, {{s.file.path, "w@2,0", B({2, 0}, {2, 6})}}};
  s.state = {"rng", R"({"i":3})", "null"};
  const std::string text = sidecar_to_json(s);
  auto parsed = parse_sidecar(text, "rank-00001.json");
  REQUIRE(parsed.ok());
  CHECK(parsed->rank == 1);
  CHECK(parsed->file.path == s.file.path);
  CHECK(parsed->tensors.at("w").chunks.at(0).box == B({2, 0}, {2, 6}));
  CHECK_FALSE(parsed->global.has_value());
  CHECK(sidecar_to_json(*parsed) == text);
}

// Applies `edit` to the sample manifest's JSON and expects parse_manifest to fail with
// kCorrupt naming `fragment` (and the source file).
void expect_rejected(const std::function<void(json::object&)>& edit, std::string_view fragment) {
  json::value root = json::parse(manifest_to_json(sample_manifest()));
  edit(root.as_object());
  auto parsed = parse_manifest(json::serialize(root), "step-000001200/manifest.json");
  REQUIRE_FALSE(parsed.ok());
  INFO(parsed.error().message());
  CHECK(parsed.error().code() == ErrorCode::kCorrupt);
  CHECK_THAT(parsed.error().message(), Catch::StartsWith("step-000001200/manifest.json: "));
  CHECK_THAT(parsed.error().message(), Catch::Contains(std::string(fragment)));
}

json::object& first_file(json::object& o) { return o["files"].as_array()[0].as_object(); }
json::array& chunks_of(json::object& o, const char* tensor) {
  return o["tensors"].as_object()[tensor].as_object()["chunks"].as_array();
}

TEST_CASE("strict manifest reader rejects", "[manifest]") {
  SECTION("absolute file path") {
    expect_rejected([](auto& o) { first_file(o)["path"] = "/etc/passwd"; }, "unsafe path");
  }
  SECTION("file path with ..") {
    expect_rejected([](auto& o) { first_file(o)["path"] = "../x.safetensors"; }, "unsafe path");
  }
  SECTION("absolute chunk path") {
    expect_rejected([](auto& o) { chunks_of(o, "b")[0].as_object()["file"] = "/x"; },
                    "unsafe path");
  }
  SECTION("chunk path with ..") {
    expect_rejected([](auto& o) { chunks_of(o, "b")[0].as_object()["file"] = "a/../b"; },
                    "unsafe path");
  }
  SECTION("unknown top-level field") {
    expect_rejected([](auto& o) { o["surprise"] = 1; }, "surprise");
  }
  SECTION("unknown nested field") {
    expect_rejected([](auto& o) { chunks_of(o, "w")[1].as_object()["stride"] = 1; }, "stride");
  }
  SECTION("missing field") {
    expect_rejected([](auto& o) { o.erase("job_id"); }, "job_id: missing");
  }
  SECTION("missing nested field") {
    expect_rejected([](auto& o) { first_file(o).erase("xxh3_128"); }, "xxh3_128: missing");
  }
  SECTION("overlapping chunks") {
    expect_rejected(
        [](auto& o) {
          chunks_of(o, "w")[1].as_object()["offsets"] = json::array{1, 0};
        },
        "overlap");
  }
  SECTION("missing chunk (gap)") {
    expect_rejected([](auto& o) { chunks_of(o, "w").erase(chunks_of(o, "w").begin() + 1); },
                    "missing chunks");
  }
  SECTION("chunk outside the shape") {
    expect_rejected(
        [](auto& o) {
          chunks_of(o, "w")[1].as_object()["offsets"] = json::array{3, 0};
        },
        "exceeds");
  }
  SECTION("chunk in an unlisted file") {
    expect_rejected(
        [](auto& o) { chunks_of(o, "b")[0].as_object()["file"] = "shard-9.safetensors"; },
        "not among the files");
  }
  SECTION("version 0") {
    expect_rejected([](auto& o) { o["version"] = 0; }, "version 0");
  }
  SECTION("wrong format") {
    expect_rejected([](auto& o) { o["format"] = "shardguard.sidecar"; }, "format");
  }
  SECTION("wrong type") {
    expect_rejected([](auto& o) { o["step"] = "1200"; }, "step");
  }
  SECTION("bad checksum text") {
    expect_rejected([](auto& o) { first_file(o)["xxh3_128"] = "ABC"; }, "hex");
  }
  SECTION("ranks do not match world size") {
    expect_rejected([](auto& o) { o["world_size"] = 3; }, "ranks");
  }
  SECTION("block sums: only one of the two fields") {
    expect_rejected([](auto& o) { first_file(o).erase("block_xxh3"); }, "block_xxh3: missing");
    expect_rejected([](auto& o) { first_file(o).erase("block_bytes"); }, "block_bytes: missing");
  }
  SECTION("block sums: a block size that is not a power of two from 4 KiB") {
    expect_rejected([](auto& o) { first_file(o)["block_bytes"] = 6000; }, "power of two");
    expect_rejected([](auto& o) { first_file(o)["block_bytes"] = 2048; }, "power of two");
    expect_rejected([](auto& o) { first_file(o)["block_bytes"] = 0; }, "power of two");
  }
  SECTION("block sums: one too few or too many for the size") {
    expect_rejected([](auto& o) { first_file(o)["size"] = 9000; }, "2 sums for 3 blocks");
    expect_rejected([](auto& o) { first_file(o)["size"] = 4096; }, "2 sums for 1 blocks");
  }
  SECTION("block sums: a size so large that the block count would overflow") {
    expect_rejected([](auto& o) { first_file(o)["size"] = UINT64_MAX; }, "sums for");
  }
  SECTION("block sums: not 16 lower-case hex digits") {
    expect_rejected([](auto& o) { first_file(o)["block_xxh3"].as_array()[1] = "FEDCBA9876543210"; },
                    "block_xxh3[1]: expected 16 lower-case hex digits");
    expect_rejected([](auto& o) { first_file(o)["block_xxh3"].as_array()[0] = 7; },
                    "block_xxh3[0]");
    expect_rejected([](auto& o) { first_file(o)["block_xxh3"] = "0123456789abcdef"; },
                    "expected an array");
  }
  SECTION("block sums in a version-1 manifest are unknown fields") {
    expect_rejected([](auto& o) { o["version"] = 1; }, "files[0].block_bytes: unknown field");
  }
  SECTION("file listed twice") {
    expect_rejected([](auto& o) { o["files"].as_array().push_back(o["files"].as_array()[0]); },
                    "listed twice");
  }
}

TEST_CASE("format 1 is read and written back as format 1", "[manifest]") {
  Manifest m = sample_manifest();
  m.version = 1;
  const std::string text = manifest_to_json(m);
  CHECK_THAT(text, Catch::Contains(R"("version":1,)"));
  CHECK_THAT(text, !Catch::Contains("block_"));  // format 1 has no block sums
  auto parsed = parse_manifest(text, "manifest.json");
  REQUIRE(parsed.ok());
  CHECK(parsed->version == 1);
  CHECK_FALSE(parsed->files[0].has_block_sums());
  CHECK(manifest_to_json(*parsed) == text);

  Sidecar s;
  s.version = 1;
  s.job_id = "j";
  s.rank = 0;
  s.world_size = 1;
  s.file = {"shard-00000-of-00001.safetensors", 10, std::string(32, 'b'), 0, 4096, {1}};
  s.global = GlobalState{};
  const std::string sidecar = sidecar_to_json(s);
  CHECK_THAT(sidecar, !Catch::Contains("block_"));
  auto back = parse_sidecar(sidecar, "rank-00000.json");
  REQUIRE(back.ok());
  CHECK(back->version == 1);
  CHECK_FALSE(back->file.has_block_sums());
}

TEST_CASE("a newer format is kUnsupported, named as newer, never corrupt", "[manifest]") {
  // What a future shardguard might write: a higher version and fields this build never saw.
  json::value root = json::parse(manifest_to_json(sample_manifest()));
  root.as_object()["version"] = 3;
  root.as_object()["future_field"] = json::object{{"x", 1}};
  root.as_object().erase("ranks");
  auto parsed = parse_manifest(json::serialize(root), "step-000001200/manifest.json");
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.error().code() == ErrorCode::kUnsupported);
  CHECK(parsed.error().message() ==
        "step-000001200/manifest.json: written by a newer shardguard (format 3; this build "
        "reads up to 2)");

  json::value sidecar = json::parse(R"({"format":"shardguard.sidecar","version":7})");
  auto s = parse_sidecar(json::serialize(sidecar), "rank-00000.json");
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code() == ErrorCode::kUnsupported);
  CHECK_THAT(s.error().message(), Catch::Contains("format 7; this build reads up to 2"));
}

TEST_CASE("u64_hex and parse_u64_hex", "[manifest]") {
  CHECK(u64_hex(0) == "0000000000000000");
  CHECK(u64_hex(0xfedcba9876543210ull) == "fedcba9876543210");
  CHECK(parse_u64_hex("fedcba9876543210") == 0xfedcba9876543210ull);
  CHECK(parse_u64_hex(u64_hex(12345)) == 12345u);
  for (const char* bad : {"", "fedcba987654321", "fedcba98765432100", "Fedcba9876543210",
                          "fedcba987654321g", "-edcba9876543210"})
    CHECK_FALSE(parse_u64_hex(bad).has_value());
}

TEST_CASE("truncated or non-JSON manifest", "[manifest]") {
  const std::string text = manifest_to_json(sample_manifest());
  auto cut = GENERATE(1, 2, 10, 100);
  REQUIRE(text.size() > static_cast<size_t>(cut));
  auto parsed = parse_manifest(text.substr(0, text.size() - cut - 1), "m.json");
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.error().code() == ErrorCode::kCorrupt);
  CHECK_THAT(parsed.error().message(), Catch::StartsWith("m.json: "));
  CHECK_FALSE(parse_manifest("", "m.json").ok());
  CHECK_FALSE(parse_manifest("[]", "m.json").ok());
  CHECK_FALSE(parse_manifest(R"({"format":"shardguard.manifest","format":"x"})", "m.json").ok());
}

}  // namespace
}  // namespace shardguard::checkpoint
