// Tests for checkpoint/box.h: intersect, copy_region and check_tiling on tables of 0-d,
// 1-d, 3-d and zero-size boxes, and a property test of resharding at the buffer level:
// W random chunks of a random tensor, read back as random boxes by R readers.
#include "checkpoint/box.h"

#include <catch2/catch.hpp>

#include "tests/checkpoint/tensor_fixtures.h"

namespace shardguard::checkpoint {
namespace {

using testing::Bytes;
using testing::extract_naive;
using testing::Rng;

Box B(std::vector<uint64_t> offsets, std::vector<uint64_t> sizes) {
  return Box{std::move(offsets), std::move(sizes)};
}

// n bytes that differ from their neighbours, so a misplaced copy shows.
Bytes iota_bytes(uint64_t n) {
  Bytes out(n);
  for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(i * 7 + 1);
  return out;
}

TEST_CASE("Box basics", "[box]") {
  CHECK(Box::whole(std::vector<uint64_t>{}).volume() == 1);
  CHECK(B({0, 0}, {3, 0}).volume() == 0);
  CHECK(B({1, 2}, {3, 4}).to_string() == "[1:4, 2:6]");
  CHECK(Box::whole(std::vector<uint64_t>{2, 3}) == B({0, 0}, {2, 3}));
}

TEST_CASE("intersect", "[box]") {
  struct Row {
    Box a, b;
    std::optional<Box> want;
  };
  auto row =
      GENERATE(Row{B({}, {}), B({}, {}), B({}, {})},               // 0-d: the one element
               Row{B({0}, {4}), B({2}, {4}), B({2}, {2})},         // 1-d overlap
               Row{B({0}, {2}), B({2}, {2}), std::nullopt},        // touching, no overlap
               Row{B({3}, {0}), B({0}, {10}), std::nullopt},       // zero-size
               Row{B({0}, {10}), B({3}, {0}), std::nullopt},       // zero-size, other side
               Row{B({0}, {4}), B({0, 0}, {4, 4}), std::nullopt},  // rank mismatch
               Row{B({0, 0, 0}, {4, 4, 4}), B({1, 2, 3}, {8, 8, 8}), B({1, 2, 3}, {3, 2, 1})},
               Row{B({0, 0, 0}, {4, 4, 4}), B({1, 4, 0}, {1, 1, 1}), std::nullopt},
               Row{B({5, 5, 5}, {1, 1, 1}), B({0, 0, 0}, {9, 9, 9}), B({5, 5, 5}, {1, 1, 1})});
  INFO(row.a.to_string() << " & " << row.b.to_string());
  CHECK(intersect(row.a, row.b) == row.want);
  CHECK(intersect(row.b, row.a) == row.want);
}

TEST_CASE("copy_region matches an element-by-element copy", "[box]") {
  struct Row {
    Box src_box, dst_box, region;
    size_t elem;
  };
  auto row =
      GENERATE(Row{B({}, {}), B({}, {}), B({}, {}), 8},         // 0-d scalar
               Row{B({0}, {10}), B({3}, {4}), B({3}, {4}), 2},  // 1-d slice
               Row{B({2}, {6}), B({0}, {10}), B({4}, {3}), 4},  // 1-d into bigger
               Row{B({0, 0, 0}, {4, 5, 6}), B({1, 1, 1}, {3, 4, 5}), B({1, 2, 3}, {2, 2, 2}), 1},
               Row{B({0, 0, 0}, {4, 5, 6}), B({2, 0, 0}, {2, 5, 6}), B({2, 0, 0}, {2, 5, 6}), 4},
               Row{B({0, 0, 0}, {4, 5, 6}), B({0, 1, 0}, {4, 3, 6}), B({1, 1, 0}, {2, 3, 6}), 2},
               Row{B({0, 0}, {3, 3}), B({0, 0}, {3, 3}), B({1, 1}, {0, 2}), 4});  // zero-size
  const Bytes src = iota_bytes(row.src_box.volume() * row.elem);
  Bytes dst(row.dst_box.volume() * row.elem, std::byte{0xEE});
  Bytes want = dst;
  // The reference: write the region's elements into `want` one at a time.
  Bytes region = extract_naive(src, row.src_box, row.region, row.elem);
  if (row.region.volume() > 0) {
    std::vector<uint64_t> idx = row.region.offsets;
    for (uint64_t i = 0; i < row.region.volume(); ++i) {
      std::memcpy(want.data() + testing::linear_in(row.dst_box, idx) * row.elem,
                  region.data() + i * row.elem, row.elem);
      for (size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < row.region.offsets[d] + row.region.sizes[d]) break;
        idx[d] = row.region.offsets[d];
      }
    }
  }
  copy_region(src.data(), row.src_box, dst.data(), row.dst_box, row.region, row.elem);
  CHECK(dst == want);
}

TEST_CASE("check_tiling", "[box]") {
  using Shape = std::vector<uint64_t>;
  SECTION("exact tilings pass") {
    CHECK(check_tiling(Shape{}, std::vector<Box>{B({}, {})}).ok());
    CHECK(check_tiling(Shape{10}, std::vector<Box>{B({0}, {4}), B({4}, {6})}).ok());
    CHECK(check_tiling(Shape{10}, std::vector<Box>{B({0}, {10}), B({10}, {0})}).ok());
    CHECK(check_tiling(Shape{0, 3}, std::vector<Box>{B({0, 0}, {0, 3})}).ok());
    CHECK(check_tiling(Shape{2, 2, 2},
                       std::vector<Box>{B({0, 0, 0}, {1, 2, 2}), B({1, 0, 0}, {1, 1, 2}),
                                        B({1, 1, 0}, {1, 1, 2})})
              .ok());
  }
  struct Bad {
    Shape shape;
    std::vector<Box> chunks;
    std::string fragment;
  };
  auto bad =
      GENERATE(Bad{{}, {B({}, {}), B({}, {})}, "overlap"}, Bad{{}, {}, "missing"},
               Bad{{10}, {B({0}, {6}), B({4}, {6})}, "overlap"},
               Bad{{10}, {B({0}, {4}), B({5}, {5})}, "missing"},
               Bad{{10}, {B({0}, {4}), B({4}, {7})}, "exceeds"},
               Bad{{10}, {B({0, 0}, {10, 1})}, "dimensions"},
               Bad{{2, 2, 2}, {B({0, 0, 0}, {2, 2, 1}), B({0, 1, 1}, {2, 1, 1})}, "missing"},
               Bad{{2, 2, 2}, {B({0, 0, 0}, {2, 2, 2}), B({1, 1, 1}, {1, 1, 1})}, "overlap"});
  auto st = check_tiling(bad.shape, bad.chunks);
  REQUIRE_FALSE(st.ok());
  INFO(st.error().message());
  CHECK_THAT(st.error().message(), Catch::Contains(bad.fragment));
}

// Reads `box` by intersecting it with every chunk and copying each intersection.
Bytes assemble(const std::vector<Box>& chunks, const std::vector<Bytes>& data, const Box& box,
               size_t elem) {
  Bytes out(box.volume() * elem, std::byte{0xA5});
  for (size_t i = 0; i < chunks.size(); ++i)
    if (auto region = intersect(chunks[i], box))
      copy_region(data[i].data(), chunks[i], out.data(), box, *region, elem);
  return out;
}

TEST_CASE("resharding property: W writers, R readers, bitwise equal", "[box][property]") {
  Rng rng(GENERATE(range(1, 41)));
  const auto shape = testing::random_shape(rng);
  const DType dtype = testing::random_byte_dtype(rng);
  const size_t elem = testing::element_bytes(dtype);
  const Box whole = Box::whole(shape);
  const Bytes global = testing::random_bytes(whole.volume() * elem, rng);
  const size_t writers = testing::uniform(rng, 1, 8);
  const auto chunks = testing::random_partition(shape, writers, rng);
  INFO("shape " << whole.to_string() << " dtype " << dtype_name(dtype) << " W " << writers);
  REQUIRE(check_tiling(shape, chunks).ok());
  std::vector<Bytes> data;
  for (const Box& c : chunks) data.push_back(extract_naive(global, whole, c, elem));

  CHECK(assemble(chunks, data, whole, elem) == global);
  const size_t readers = testing::uniform(rng, 1, 8);
  for (const Box& box : testing::random_partition(shape, readers, rng)) {
    INFO("reader box " << box.to_string());
    CHECK(assemble(chunks, data, box, elem) == extract_naive(global, whole, box, elem));
  }
  for (int i = 0; i < 8; ++i) {
    const Box box = testing::random_box(shape, rng);
    INFO("random box " << box.to_string());
    CHECK(assemble(chunks, data, box, elem) == extract_naive(global, whole, box, elem));
  }
}

}  // namespace
}  // namespace shardguard::checkpoint

TEST_CASE("A malformed box (offsets and sizes of different lengths) is refused, not read past",
          "[checkpoint]") {
  const shardguard::checkpoint::Box bad{{1, 2}, {3}};
  CHECK(bad.to_string() == "[1:4, 2:?]");
  const std::vector<uint64_t> shape = {8, 8};
  auto st = shardguard::checkpoint::check_box_in_shape(bad, shape);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message(), Catch::Contains("[1:4, 2:?]"));
}
