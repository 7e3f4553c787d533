#include "checkpoint/box.h"

#include <algorithm>
#include <cstring>

namespace shardguard::checkpoint {

Box Box::whole(std::span<const uint64_t> shape) {
  return Box{std::vector<uint64_t>(shape.size(), 0), {shape.begin(), shape.end()}};
}

uint64_t Box::volume() const {
  uint64_t v = 1;
  for (uint64_t s : sizes) v *= s;
  return v;
}

std::string Box::to_string() const {
  // Also renders malformed boxes (offsets and sizes of different lengths, from bad input).
  std::string out = "[";
  for (size_t i = 0; i < std::max(offsets.size(), sizes.size()); ++i) {
    if (i) out += ", ";
    out += i < offsets.size() ? std::to_string(offsets[i]) : "?";
    out += ":";
    out += i < offsets.size() && i < sizes.size() ? std::to_string(offsets[i] + sizes[i]) : "?";
  }
  return out + "]";
}

std::optional<Box> intersect(const Box& a, const Box& b) {
  if (a.rank() != b.rank()) return std::nullopt;
  Box out;
  out.offsets.resize(a.rank());
  out.sizes.resize(a.rank());
  for (size_t d = 0; d < a.rank(); ++d) {
    uint64_t lo = std::max(a.offsets[d], b.offsets[d]);
    uint64_t hi = std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
    if (hi <= lo) return std::nullopt;
    out.offsets[d] = lo;
    out.sizes[d] = hi - lo;
  }
  return out;
}

Status check_box_in_shape(const Box& box, std::span<const uint64_t> shape) {
  if (box.offsets.size() != shape.size() || box.sizes.size() != shape.size())
    return Error(ErrorCode::kInvalid, "box " + box.to_string() + " has " +
                                          std::to_string(box.sizes.size()) +
                                          " dimensions, the tensor " +
                                          std::to_string(shape.size()));
  for (size_t d = 0; d < shape.size(); ++d) {
    if (box.offsets[d] > shape[d] || box.sizes[d] > shape[d] - box.offsets[d])
      return Error(ErrorCode::kInvalid, "box " + box.to_string() + " exceeds dimension " +
                                            std::to_string(d) + " of size " +
                                            std::to_string(shape[d]));
  }
  return {};
}

Status check_tiling(std::span<const uint64_t> shape, std::span<const Box> chunks) {
  uint64_t covered = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    auto st = check_box_in_shape(chunks[i], shape);
    if (!st.ok()) return std::move(st).error().context("chunk " + std::to_string(i));
    for (size_t j = 0; j < i; ++j) {
      if (chunks[i].volume() != 0 && intersect(chunks[i], chunks[j]))
        return Error(ErrorCode::kCorrupt, "chunks " + std::to_string(j) + " " +
                                              chunks[j].to_string() + " and " +
                                              std::to_string(i) + " " + chunks[i].to_string() +
                                              " overlap");
    }
    covered += chunks[i].volume();
  }
  uint64_t total = Box::whole(shape).volume();
  if (covered != total)
    return Error(ErrorCode::kCorrupt, "chunks cover " + std::to_string(covered) + " of " +
                                          std::to_string(total) + " elements (missing chunks)");
  return {};
}

uint64_t run_bytes_of(const Box& src_box, const Box& dst_box, const Box& region,
                      size_t element_bytes, size_t* inner_out) {
  const size_t n = region.rank();
  if (n == 0) {
    *inner_out = 0;
    return element_bytes;
  }
  size_t inner = n - 1;
  uint64_t run = region.sizes[n - 1];
  while (inner > 0 && region.sizes[inner] == src_box.sizes[inner] &&
         region.sizes[inner] == dst_box.sizes[inner]) {
    --inner;
    run *= region.sizes[inner];
  }
  *inner_out = inner;
  return run * element_bytes;
}

void copy_region(const std::byte* src, const Box& src_box, std::byte* dst, const Box& dst_box,
                 const Box& region, size_t element_bytes) {
  if (region.volume() == 0) return;
  size_t inner = 0;
  const uint64_t run = run_bytes_of(src_box, dst_box, region, element_bytes, &inner);
  for_each_run(src_box, dst_box, region, inner, element_bytes,
               [&](uint64_t s, uint64_t t) { std::memcpy(dst + t, src + s, run); });
}

}  // namespace shardguard::checkpoint
