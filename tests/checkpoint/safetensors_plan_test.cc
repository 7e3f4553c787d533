// Writer tests for checkpoint/safetensors.h: plan_safetensors() lays files out like the
// reference writer, and everything it plans parses back to the same header.
#include <algorithm>
#include <catch2/catch.hpp>

#include "checkpoint/safetensors.h"
#include "tests/checkpoint/safetensors_fixtures.h"

namespace shardguard::checkpoint {
namespace {

TEST_CASE("plan then parse round trips every dtype and shape", "[safetensors]") {
  DType dtype = GENERATE(from_range(kAllDTypes.begin(), kAllDTypes.end()));
  uint64_t alignment = GENERATE(0, 64, 4096);
  CAPTURE(dtype_name(dtype), alignment);
  std::vector<PlannedTensor> planned;
  int i = 0;
  for (auto& shape : shapes_for(dtype))
    planned.push_back({"t" + std::to_string(i++), dtype, shape});
  auto layout = plan_safetensors(planned, {{"format", "pt"}}, alignment);
  REQUIRE(layout.ok());
  CHECK(layout->header.data_start % std::max<uint64_t>(alignment, 8) == 0);
  CHECK(layout->header_bytes.size() == layout->header.data_start);
  Bytes file = build_file(*layout);
  CHECK(file.size() == layout->file_size);
  auto parsed = parse_safetensors(file, "rt.safetensors");
  REQUIRE(parsed.ok());
  CHECK(*parsed == layout->header);
  CHECK(parsed->metadata.at("format") == "pt");
  for (const PlannedTensor& p : planned) {
    const TensorEntry* t = parsed->find(p.name);
    REQUIRE(t != nullptr);
    CHECK(t->shape == p.shape);
    CHECK(t->dtype == dtype);
  }
  CHECK(parsed->find("missing") == nullptr);
}

TEST_CASE("plan orders like the reference writer and aligns each tensor", "[safetensors]") {
  std::vector<PlannedTensor> planned;
  for (DType d : kAllDTypes) {
    uint64_t n = bit_size(d) < 8 ? 4 : 3;
    planned.push_back({"b_" + std::string(dtype_name(d)), d, {n}});
    planned.push_back({"a_" + std::string(dtype_name(d)), d, {n}});
  }
  auto layout = plan_safetensors(planned, {});
  REQUIRE(layout.ok());
  const auto& tensors = layout->header.tensors;
  REQUIRE(tensors.size() == planned.size());
  CHECK(tensors.front().name == "a_U64");
  CHECK(tensors[1].name == "b_U64");
  CHECK(tensors.back().name == "b_BOOL");
  uint64_t expected_begin = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    CHECK(tensors[i].begin == expected_begin);
    expected_begin = tensors[i].end;
    uint64_t element = std::max<uint64_t>(bit_size(tensors[i].dtype) / 8, 1);
    CHECK(layout->header.file_offset(tensors[i]) % element == 0);
    if (i > 0) CHECK(tensors[i - 1].dtype >= tensors[i].dtype);
  }
  CHECK(layout->file_size == layout->header.data_start + expected_begin);
  CHECK(parse_safetensors(build_file(*layout), "o.safetensors").ok());
}

TEST_CASE("plan matches the reference forced-alignment vector", "[safetensors]") {
  auto layout = plan_safetensors({{"attn0", DType::kF32, {1, 1, 2, 3}}}, {});
  REQUIRE(layout.ok());
  std::string json = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
  REQUIRE(json.size() == 65);
  Bytes expected = file_with_header(json + std::string(7, ' '), 0);
  CHECK(layout->header_bytes == expected);
  CHECK(layout->header.header_size == 72);
  CHECK(layout->header.data_start == 80);
  CHECK(layout->file_size == 104);
  auto page = plan_safetensors({{"attn0", DType::kF32, {1, 1, 2, 3}}}, {}, 4096);
  REQUIRE(page.ok());
  CHECK(page->header.header_size == 4088);
  CHECK(page->header.data_start == 4096);
}

TEST_CASE("plan renders metadata first and escapes text like serde_json", "[safetensors]") {
  auto layout = plan_safetensors({{"w\"\\\n\x01", DType::kU8, {1}}}, {{"b", "2"}, {"a", "é/\t"}});
  REQUIRE(layout.ok());
  std::string text(reinterpret_cast<const char*>(layout->header_bytes.data()) + 8,
                   layout->header_bytes.size() - 8);
  CHECK(text.starts_with(
      "{\"__metadata__\":{\"a\":\"é/\\t\",\"b\":\"2\"},\"w\\\"\\\\\\n\\u0001\":{\"dtype\":\"U8\""));
  auto parsed = parse_safetensors(build_file(*layout), "m.safetensors");
  REQUIRE(parsed.ok());
  CHECK(parsed->tensors.at(0).name == "w\"\\\n\x01");
  CHECK(parsed->metadata.at("a") == "é/\t");
}

TEST_CASE("plan rejects bad names, sizes and alignments", "[safetensors]") {
  using Planned = std::vector<PlannedTensor>;
  auto rejected = [](Planned planned, std::map<std::string, std::string> metadata = {},
                     uint64_t alignment = 0) {
    auto layout = plan_safetensors(std::move(planned), std::move(metadata), alignment);
    return !layout.ok() && layout.error().code() == ErrorCode::kInvalid;
  };
  CHECK(rejected({{"", DType::kU8, {1}}}));
  CHECK(rejected({{"__metadata__", DType::kU8, {1}}}));
  CHECK(rejected({{"__metadata__x", DType::kU8, {1}}}));
  CHECK(rejected({{"a", DType::kU8, {1}}, {"a", DType::kF32, {1}}}));
  CHECK(rejected({{"bad\xff", DType::kU8, {1}}}));
  CHECK(rejected({{"a", DType::kU8, {1}}}, {{"k", "\xc0\x80"}}));
  CHECK(rejected({{"f4", DType::kF4, {}}}));
  CHECK(rejected({{"f6", DType::kF6E2M3, {3}}}));
  CHECK(rejected({{"big", DType::kU64, {1ull << 62}}}));
  Planned huge;  // each fine alone, together more than 2^64 bytes
  for (int i = 0; i < 16; ++i) huge.push_back({"t" + std::to_string(i), DType::kU8, {1ull << 60}});
  CHECK(rejected(huge));
  CHECK(rejected({{"a", DType::kU8, {1}}}, {}, 3));
  CHECK(rejected({{"a", DType::kU8, {1}}}, {}, 1ull << 40));  // header past 100 MB
  CHECK(rejected({{"a", DType::kU8, {1}}}, {{"k", std::string(kMaxSafetensorsHeaderSize, 'x')}}));
  auto empty = plan_safetensors({}, {});
  REQUIRE(empty.ok());
  CHECK(empty->file_size == 16);
  CHECK(parse_safetensors(empty->header_bytes, "e.safetensors").ok());
}

}  // namespace
}  // namespace shardguard::checkpoint
