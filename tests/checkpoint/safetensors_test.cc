// Reader tests for checkpoint/safetensors.h: the reference implementation's rules and test
// vectors (checkpoint-formats.md 1.4, 1.6), and our extra strictness (duplicate keys).
#include "checkpoint/safetensors.h"

#include <catch2/catch.hpp>

#include "tests/checkpoint/safetensors_fixtures.h"

namespace shardguard::checkpoint {
namespace {

// Parses and expects kCorrupt whose message contains `fragment`.
void expect_corrupt(const Bytes& file, std::string_view fragment) {
  auto parsed = parse_safetensors(file, "x.safetensors");
  REQUIRE_FALSE(parsed.ok());
  INFO(parsed.error().message());
  CHECK(parsed.error().code() == ErrorCode::kCorrupt);
  CHECK_THAT(parsed.error().message(), Catch::StartsWith("x.safetensors: "));
  CHECK_THAT(parsed.error().message(), Catch::Contains(std::string(fragment)));
}

TEST_CASE("dtype names round trip and sizes match the reference table", "[safetensors]") {
  for (DType d : kAllDTypes) {
    auto parsed = parse_dtype(dtype_name(d));
    REQUIRE(parsed.ok());
    CHECK(*parsed == d);
  }
  CHECK(bit_size(DType::kF4) == 4);
  CHECK(bit_size(DType::kF6E3M2) == 6);
  CHECK(bit_size(DType::kF8E8M0) == 8);
  CHECK(bit_size(DType::kBF16) == 16);
  CHECK(bit_size(DType::kC64) == 64);
  CHECK_FALSE(parse_dtype("f32").ok());
  CHECK_FALSE(parse_dtype("F31").ok());
  CHECK(parse_dtype("F31").error().code() == ErrorCode::kInvalid);
}

TEST_CASE("checked_byte_size overflows and sub-byte rules", "[safetensors]") {
  std::vector<uint64_t> scalar;
  CHECK(*checked_byte_size(scalar, DType::kF64) == 8);
  CHECK(*checked_byte_size(std::vector<uint64_t>{3, 0}, DType::kF32) == 0);
  CHECK_FALSE(checked_byte_size(std::vector<uint64_t>{3}, DType::kF4).ok());
  CHECK(*checked_byte_size(std::vector<uint64_t>{4}, DType::kF6E2M3) == 3);
  CHECK_FALSE(checked_byte_size(scalar, DType::kF4).ok());
  CHECK_FALSE(
      checked_byte_size(std::vector<uint64_t>{2, 18446744073709551614ull}, DType::kI32).ok());
  CHECK_FALSE(
      checked_byte_size(std::vector<uint64_t>{2, 9223372036854775807ull}, DType::kI32).ok());
  // Left to right, like the reference: a trailing 0 does not rescue an overflow.
  CHECK_FALSE(checked_byte_size(std::vector<uint64_t>{1ull << 40, 1ull << 40, 0}, DType::kU8).ok());
  CHECK(*checked_byte_size(std::vector<uint64_t>{0, 1ull << 40, 1ull << 40}, DType::kU8) == 0);
}

TEST_CASE("reference vectors that must parse", "[safetensors]") {
  SECTION("60-byte unpadded header") {
    std::string json = R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})";
    REQUIRE(json.size() == 60);
    Bytes file = file_with_header(json, 16);
    REQUIRE(std::to_integer<char>(file[0]) == '<');
    auto parsed = parse_safetensors(file, "x.safetensors");
    REQUIRE(parsed.ok());
    CHECK(parsed->data_start == 68);
    CHECK(parsed->tensors.at(0) == TensorEntry{"test", DType::kI32, {2, 2}, 0, 16});
  }
  SECTION("whitespace padded, trailing") {
    auto parsed = parse_safetensors(file_with_header("{}\x0D\x20\x09\x0A", 0), "x.safetensors");
    REQUIRE(parsed.ok());
    CHECK(parsed->tensors.empty());
  }
  SECTION("whitespace padded, leading") {
    CHECK(parse_safetensors(file_with_header("\x09\x0A{}\x0D\x20", 0), "x.safetensors").ok());
  }
  SECTION("zero-sized tensor") {
    auto parsed = parse_safetensors(
        file_with_header(R"({"test":{"dtype":"I32","shape":[2,0],"data_offsets":[0,0]}})", 0),
        "x.safetensors");
    REQUIRE(parsed.ok());
    CHECK(parsed->tensors.at(0).byte_size() == 0);
  }
  SECTION("several zero-sized tensors share an offset; header order is kept") {
    auto parsed = parse_safetensors(
        file_with_header(R"({"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                         R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                         R"("y":{"dtype":"U8","shape":[0],"data_offsets":[4,4]},)"
                         R"("b":{"dtype":"U8","shape":[1],"data_offsets":[4,5]}})",
                         5),
        "x.safetensors");
    REQUIRE(parsed.ok());
    std::vector<std::string> names;
    for (auto& t : parsed->tensors) names.push_back(t.name);
    CHECK(names == std::vector<std::string>{"a", "z", "y", "b"});
  }
  SECTION("unknown fields in a tensor entry are ignored, __metadata__ null is none") {
    auto parsed = parse_safetensors(
        file_with_header(R"({"__metadata__":null,"t":{"dtype":"U8","shape":[],)"
                         R"("data_offsets":[0,1],"extra":[{"deep":[1.5,null]}]}})",
                         1),
        "x.safetensors");
    REQUIRE(parsed.ok());
    CHECK(parsed->metadata.empty());
  }
}

TEST_CASE("reference vectors that must fail, each with its rule", "[safetensors]") {
  std::string test_json = R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})";
  SECTION("header too small") {
    expect_corrupt({}, "too small");
    expect_corrupt(Bytes(7, std::byte{0}), "too small");
  }
  SECTION("header too large") {
    Bytes file = file_with_header(test_json, 16);
    for (int i = 4; i < 8; ++i) file[i] = std::byte{0xff};
    expect_corrupt(file, "exceeds the limit");
    Bytes limit = to_bytes(std::string_view("\x01\xe1\xf5\x05\0\0\0\0", 8));  // 100'000'001
    expect_corrupt(limit, "exceeds the limit");
    Bytes at_limit = to_bytes(std::string_view("\x00\xe1\xf5\x05\0\0\0\0", 8));  // 100'000'000
    expect_corrupt(at_limit, "runs past the end");
  }
  SECTION("invalid header length") {
    expect_corrupt(to_bytes(std::string("<\0\0\0\0\0\0\0", 8)), "runs past the end");
    Bytes max = Bytes(8, std::byte{0xff});
    expect_corrupt(max, "exceeds the limit");
  }
  SECTION("non-UTF-8 header") {
    expect_corrupt(file_with_header("\xff", 0), "not valid UTF-8");
    expect_corrupt(file_with_header("{\"\xed\xa0\x80\":1}", 0), "not valid UTF-8");  // surrogate
    expect_corrupt(file_with_header("{\"\xc0\xaf\":1}", 0), "not valid UTF-8");      // overlong
  }
  SECTION("not JSON") {
    expect_corrupt(file_with_header("{", 0), "not valid JSON");
    expect_corrupt(file_with_header("{}{}", 0), "not valid JSON");
    expect_corrupt(file_with_header(std::string_view("{}\0", 3), 0), "not valid JSON");
    expect_corrupt(file_with_header("", 0), "not valid JSON");
    expect_corrupt(file_with_header("{/*c*/}", 0), "not valid JSON");
  }
  SECTION("metadata incomplete buffer: trailing polyglot bytes and missing bytes") {
    expect_corrupt(file_with_header(test_json, 32), "16 bytes after the last tensor");
    expect_corrupt(file_with_header(test_json, 14), "truncated");
  }
  SECTION("invalid info") {
    Bytes file =
        file_with_header(R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,4]}})", 4);
    expect_corrupt(file, "tensor 'test': data_offsets [0,4] but I32 [2,2] needs 16 bytes");
  }
  SECTION("validation overflow") {
    for (std::string dim : {"18446744073709551614", "9223372036854775807"}) {
      expect_corrupt(
          file_with_header(
              R"({"test":{"dtype":"I32","shape":[2,)" + dim + R"(],"data_offsets":[0,16]}})", 16),
          "overflows 64 bits");
    }
  }
  SECTION("sub-byte tensor that does not fill whole bytes") {
    expect_corrupt(file_with_header(R"({"t":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}})", 1),
                   "do not fill whole bytes");
  }
}

TEST_CASE("offsets must be contiguous from 0", "[safetensors]") {
  auto header = [](std::string a, std::string b) {
    return R"({"a":{"dtype":"F32","shape":[2],"data_offsets":)" + a +
           R"(},"b":{"dtype":"F32","shape":[2],"data_offsets":)" + b + "}}";
  };
  SECTION("gap") {
    expect_corrupt(file_with_header(header("[0,8]", "[12,20]"), 20),
                   "tensor 'b': data_offsets [12,20] leave a gap after tensor 'a' (ends at 8)");
  }
  SECTION("overlap") {
    expect_corrupt(file_with_header(header("[0,8]", "[4,12]"), 12),
                   "tensor 'b': data_offsets [4,12] overlap tensor 'a' (ends at 8)");
    expect_corrupt(file_with_header(header("[0,8]", "[0,8]"), 8), "overlap tensor 'a'");
  }
  SECTION("first not at 0") {
    expect_corrupt(file_with_header(header("[8,16]", "[16,24]"), 24),
                   "tensor 'a': data_offsets [8,16] do not start the data section at 0");
  }
  SECTION("end before begin") {
    expect_corrupt(file_with_header(header("[0,8]", "[8,0]"), 8), "end before they begin");
  }
  SECTION("header key order does not matter") {
    CHECK(parse_safetensors(file_with_header(header("[8,16]", "[0,8]"), 16), "x").ok());
  }
}

TEST_CASE("error messages name the file and the tensor", "[safetensors]") {
  Bytes file = file_with_header(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}})", 8);
  auto parsed = parse_safetensors(file, "shard-00000-of-00002.safetensors");
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.error().code() == ErrorCode::kCorrupt);
  CHECK(parsed.error().message() ==
        "shard-00000-of-00002.safetensors: tensor 'w': data_offsets [0,8] but F32 [4] needs 16 "
        "bytes");
}

TEST_CASE("duplicate keys are rejected at every level", "[safetensors]") {
  std::string t = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  expect_corrupt(file_with_header(R"({"a":)" + t + R"(,"a":)" + t + "}", 4), "duplicate key \"a\"");
  expect_corrupt(file_with_header(
                     R"({"a":{"dtype":"F32","dtype":"I32","shape":[1],"data_offsets":[0,4]}})", 4),
                 "duplicate key \"dtype\"");
  expect_corrupt(file_with_header(R"({"__metadata__":{},"__metadata__":{}})", 0),
                 "duplicate key \"__metadata__\"");
  expect_corrupt(file_with_header(R"({"__metadata__":{"k":"1","k":"2"}})", 0),
                 "duplicate key \"k\"");
  // Same key spelled with an escape is still the same key.
  expect_corrupt(file_with_header(R"({"a":)" + t + R"(,"\u0061":)" + t + "}", 4), "duplicate key");
  // The same key in sibling objects is fine.
  CHECK(parse_safetensors(file_with_header(R"({"__metadata__":{"k":"1"},"a":)" + t + "}", 4), "x")
            .ok());
}

TEST_CASE("wrong types in the header", "[safetensors]") {
  auto entry = [](std::string fields) { return file_with_header(R"({"t":)" + fields + "}", 4); };
  SECTION("unknown dtype") {
    expect_corrupt(entry(R"({"dtype":"F31","shape":[1],"data_offsets":[0,4]})"),
                   "tensor 't': unknown dtype 'F31'");
    expect_corrupt(entry(R"({"dtype":"f32","shape":[1],"data_offsets":[0,4]})"), "unknown dtype");
    expect_corrupt(entry(R"({"dtype":32,"shape":[1],"data_offsets":[0,4]})"), "\"dtype\"");
  }
  SECTION("metadata values must be strings") {
    expect_corrupt(file_with_header(R"({"__metadata__":{"step":12}})", 0),
                   "__metadata__ value of 'step' is not a string");
    expect_corrupt(file_with_header(R"({"__metadata__":["a"]})", 0), "__metadata__ is not");
    expect_corrupt(file_with_header(R"({"__metadata__":"a"})", 0), "__metadata__ is not");
  }
  SECTION("shapes and offsets") {
    expect_corrupt(entry(R"({"dtype":"F32","shape":1,"data_offsets":[0,4]})"), "\"shape\"");
    expect_corrupt(entry(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})"), "\"shape\"");
    expect_corrupt(entry(R"({"dtype":"F32","shape":[1.0],"data_offsets":[0,4]})"), "\"shape\"");
    expect_corrupt(entry(R"({"dtype":"F32","data_offsets":[0,4]})"), "\"shape\"");
    expect_corrupt(entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4,4]})"), "data_offsets");
    expect_corrupt(entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0]})"), "data_offsets");
    expect_corrupt(entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0,"4"]})"), "data_offsets");
    expect_corrupt(entry(R"({"dtype":"F32","shape":[1]})"), "data_offsets");
    expect_corrupt(entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0,1e20]})"), "data_offsets");
  }
  SECTION("entries and root") {
    expect_corrupt(entry(R"("F32")"), "tensor 't': entry is not a JSON object");
    expect_corrupt(entry(R"(["F32",[1],[0,4]])"), "entry is not a JSON object");
    expect_corrupt(file_with_header("[]", 0), "header is not a JSON object");
    expect_corrupt(file_with_header("null", 0), "header is not a JSON object");
  }
}

TEST_CASE("header-only parse for mmap and streaming readers", "[safetensors]") {
  auto layout = plan_safetensors({{"w", DType::kBF16, {3, 5}}}, {{"k", "v"}}, 4096);
  REQUIRE(layout.ok());
  Bytes file = build_file(*layout);
  auto n = read_safetensors_header_size(std::span(file).first(8), file.size(), "h");
  REQUIRE(n.ok());
  CHECK(*n == layout->header.header_size);
  auto parsed = parse_safetensors_header(layout->header_bytes, file.size(), "h");
  REQUIRE(parsed.ok());
  CHECK(*parsed == layout->header);
  // The data section's size still counts: the same head with a wrong file size fails.
  CHECK(parse_safetensors_header(layout->header_bytes, file.size() + 1, "h").error().code() ==
        ErrorCode::kCorrupt);
  // Too little of the head is the caller's mistake, not corruption.
  auto short_head = parse_safetensors_header(std::span(file).first(100), file.size(), "h");
  REQUIRE_FALSE(short_head.ok());
  CHECK(short_head.error().code() == ErrorCode::kInvalid);
  CHECK(read_safetensors_header_size(std::span(file).first(4), file.size(), "h").error().code() ==
        ErrorCode::kInvalid);
}

}  // namespace
}  // namespace shardguard::checkpoint
