// Boxes of a tensor's global index space, and copies between row-major buffers that hold
// different boxes: the geometry behind chunks and resharding. A rank's chunk covers a box
// of the global tensor; reading any other box means intersecting it with every chunk and
// copying each intersection. Pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"

namespace shardguard::checkpoint {

struct Box {
  std::vector<uint64_t> offsets;  // first index in each dimension
  std::vector<uint64_t> sizes;    // extent in each dimension

  // The whole tensor of `shape`.
  static Box whole(std::span<const uint64_t> shape);
  size_t rank() const { return sizes.size(); }
  // Element count (1 for a 0-dimensional box); 0 if any size is 0.
  uint64_t volume() const;
  bool operator==(const Box&) const = default;
  std::string to_string() const;  // "[0:4, 8:16]"
};

// The common part of two boxes of the same rank, or nullopt when they do not overlap.
std::optional<Box> intersect(const Box& a, const Box& b);

// Checks that `box` lies inside a tensor of `shape` (same rank, no overflow).
Status check_box_in_shape(const Box& box, std::span<const uint64_t> shape);

// Checks that `chunks` tile `shape` exactly: each inside, none overlapping, and together
// covering every element. Errors name the offending chunks by index and box.
Status check_tiling(std::span<const uint64_t> shape, std::span<const Box> chunks);

// Copying `region` from a packed buffer holding `src_box` into one holding `dst_box` moves
// runs of bytes contiguous in both: returns their length, and in *inner_out how many outer
// dimensions enumerate them (see for_each_run).
uint64_t run_bytes_of(const Box& src_box, const Box& dst_box, const Box& region,
                      size_t element_bytes, size_t* inner_out);

// Calls fn(src_byte_offset, dst_byte_offset) for each of those runs, in row-major order.
template <typename Fn>
void for_each_run(const Box& src_box, const Box& dst_box, const Box& region, size_t inner,
                  size_t element_bytes, Fn&& fn) {
  const size_t n = region.rank();
  if (n == 0) {
    fn(uint64_t{0}, uint64_t{0});
    return;
  }
  std::vector<uint64_t> src_stride(n), dst_stride(n);
  src_stride[n - 1] = dst_stride[n - 1] = 1;
  for (size_t d = n - 1; d > 0; --d) {
    src_stride[d - 1] = src_stride[d] * src_box.sizes[d];
    dst_stride[d - 1] = dst_stride[d] * dst_box.sizes[d];
  }
  std::vector<uint64_t> idx(inner, 0);
  for (;;) {
    uint64_t s = 0, t = 0;
    for (size_t d = 0; d < n; ++d) {
      uint64_t i = region.offsets[d] + (d < inner ? idx[d] : 0);
      s += (i - src_box.offsets[d]) * src_stride[d];
      t += (i - dst_box.offsets[d]) * dst_stride[d];
    }
    fn(s * element_bytes, t * element_bytes);
    size_t d = inner;
    while (d > 0) {
      --d;
      if (++idx[d] < region.sizes[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (inner == 0) return;
  }
}

// Copies the elements of `region` from `src` (a packed row-major buffer holding `src_box`)
// into `dst` (a packed row-major buffer holding `dst_box`). `region` must lie in both.
void copy_region(const std::byte* src, const Box& src_box, std::byte* dst, const Box& dst_box,
                 const Box& region, size_t element_bytes);

}  // namespace shardguard::checkpoint
