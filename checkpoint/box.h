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

// Copies the elements of `region` from `src` (a packed row-major buffer holding `src_box`)
// into `dst` (a packed row-major buffer holding `dst_box`). `region` must lie in both.
void copy_region(const std::byte* src, const Box& src_box, std::byte* dst, const Box& dst_box,
                 const Box& region, size_t element_bytes);

}  // namespace shardguard::checkpoint
