// Test fixtures for chunked tensors: random shapes and partitions, a naive element-by-element
// box extraction (independent of copy_region, so it can check it), and a synthetic
// checkpoint writer built from plan_safetensors + manifest_to_json (no ShardWriter needed).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "checkpoint/box.h"
#include "checkpoint/dtype.h"
#include "checkpoint/manifest.h"
#include "checkpoint/paths.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/verify.h"
#include "core/filesystem.h"

namespace shardguard::checkpoint::testing {

using Bytes = std::vector<std::byte>;
using Rng = std::mt19937_64;

inline uint64_t uniform(Rng& rng, uint64_t lo, uint64_t hi) {  // inclusive
  return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
}

inline Bytes random_bytes(size_t n, Rng& rng) {
  Bytes out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

inline size_t element_bytes(DType dtype) { return bit_size(dtype) / 8; }

// A dtype of 8 bits or more.
inline DType random_byte_dtype(Rng& rng) {
  for (;;) {
    DType d = kAllDTypes[uniform(rng, 0, kAllDTypes.size() - 1)];
    if (bit_size(d) >= 8) return d;
  }
}

// Row-major linear index of `idx` (absolute) inside `box`.
inline uint64_t linear_in(const Box& box, const std::vector<uint64_t>& idx) {
  uint64_t at = 0;
  for (size_t d = 0; d < box.rank(); ++d) at = at * box.sizes[d] + (idx[d] - box.offsets[d]);
  return at;
}

// Copies `box` out of `src` (holding `src_box`) one element at a time: the slow reference.
inline Bytes extract_naive(const Bytes& src, const Box& src_box, const Box& box, size_t elem) {
  Bytes out(box.volume() * elem);
  if (box.volume() == 0) return out;
  std::vector<uint64_t> idx = box.offsets;
  for (uint64_t i = 0; i < box.volume(); ++i) {
    std::memcpy(out.data() + i * elem, src.data() + linear_in(src_box, idx) * elem, elem);
    for (size_t d = box.rank(); d-- > 0;) {
      if (++idx[d] < box.offsets[d] + box.sizes[d]) break;
      idx[d] = box.offsets[d];
    }
  }
  return out;
}

// `parts` boxes splitting dimension `dim` of `shape` at random cut points (some may be
// empty when the dimension is shorter than `parts`).
inline std::vector<Box> split_along(const std::vector<uint64_t>& shape, size_t dim, size_t parts,
                                    Rng& rng) {
  std::vector<uint64_t> cuts{0, shape[dim]};
  for (size_t i = 1; i < parts; ++i) cuts.push_back(uniform(rng, 0, shape[dim]));
  std::sort(cuts.begin(), cuts.end());
  std::vector<Box> out;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    Box b = Box::whole(shape);
    b.offsets[dim] = cuts[i];
    b.sizes[dim] = cuts[i + 1] - cuts[i];
    out.push_back(b);
  }
  return out;
}

// A grid: every dimension split into 1-2 random parts, at most `max_parts` boxes in all.
inline std::vector<Box> split_grid(const std::vector<uint64_t>& shape, size_t max_parts, Rng& rng) {
  std::vector<Box> boxes{Box::whole(shape)};
  for (size_t d = 0; d < shape.size(); ++d) {
    if (boxes.size() * 2 > max_parts || uniform(rng, 0, 1) == 0) continue;
    std::vector<Box> next;
    uint64_t cut = uniform(rng, 0, shape[d]);
    for (const Box& b : boxes) {
      Box lo = b, hi = b;
      lo.sizes[d] = cut;
      hi.offsets[d] = cut;
      hi.sizes[d] = shape[d] - cut;
      next.push_back(lo);
      next.push_back(hi);
    }
    boxes = std::move(next);
  }
  return boxes;
}

// W boxes tiling `shape`: a split along a random dimension, or a grid.
inline std::vector<Box> random_partition(const std::vector<uint64_t>& shape, size_t parts,
                                         Rng& rng) {
  if (shape.empty()) return {Box::whole(shape)};
  if (uniform(rng, 0, 2) == 0) return split_grid(shape, parts, rng);
  return split_along(shape, uniform(rng, 0, shape.size() - 1), parts, rng);
}

// A random box inside `shape` (possibly empty).
inline Box random_box(const std::vector<uint64_t>& shape, Rng& rng) {
  Box b = Box::whole(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    uint64_t lo = uniform(rng, 0, shape[d]);
    uint64_t hi = uniform(rng, lo, shape[d]);
    b.offsets[d] = lo;
    b.sizes[d] = hi - lo;
  }
  return b;
}

inline std::vector<uint64_t> random_shape(Rng& rng, size_t min_dims = 1, size_t max_dims = 4,
                                          uint64_t max_dim = 9) {
  std::vector<uint64_t> shape(uniform(rng, min_dims, max_dims));
  for (auto& s : shape) s = uniform(rng, 1, max_dim);
  return shape;
}

// A tensor with its reference contents and the chunks it is stored as; chunk i goes to
// rank i % world_size.
struct SyntheticTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;
  Bytes global;  // row-major reference contents
  std::vector<Box> chunks;
};

inline SyntheticTensor random_tensor(std::string name, size_t parts, Rng& rng) {
  SyntheticTensor t{std::move(name), random_byte_dtype(rng), random_shape(rng), {}, {}};
  t.global = random_bytes(Box::whole(t.shape).volume() * element_bytes(t.dtype), rng);
  t.chunks = random_partition(t.shape, parts, rng);
  return t;
}

inline void write_bytes(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

inline Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Bytes out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

// A safetensors file holding `tensors` (key -> (dtype, shape, bytes)).
struct ShardTensor {
  std::string key;
  DType dtype;
  std::vector<uint64_t> shape;
  Bytes bytes;
};

inline void write_safetensors(const std::string& path, const std::vector<ShardTensor>& tensors) {
  std::vector<PlannedTensor> planned;
  for (const auto& t : tensors) planned.push_back({t.key, t.dtype, t.shape});
  auto layout = plan_safetensors(planned, {{"format", "pt"}});
  if (!layout.ok()) throw std::runtime_error(layout.error().message());
  Bytes file = layout->header_bytes;
  for (const TensorEntry& e : layout->header.tensors)
    for (const auto& t : tensors)
      if (t.key == e.name) file.insert(file.end(), t.bytes.begin(), t.bytes.end());
  write_bytes(path, file);
}

// Writes the shards of `tensors` for `world_size` ranks into `step_dir` and returns the
// manifest (written as manifest.json too when `commit`). Whole single-chunk tensors keep
// their name as key; chunks are stored as "<name>@<i>". Files get block sums of
// `block_bytes` (format 2), or none with 0.
inline Manifest write_synthetic_checkpoint(const std::string& step_dir, uint64_t step,
                                           uint32_t world_size,
                                           const std::vector<SyntheticTensor>& tensors,
                                           bool commit = true,
                                           uint64_t block_bytes = kDefaultChecksumBlockBytes) {
  PosixFilesystem::instance().create_dirs(step_dir).value();
  Manifest m;
  m.job_id = "test-job";
  m.step = step;
  m.world_size = world_size;
  m.created_unix_ms = 1700000000000;
  m.global.step = step;
  std::vector<std::vector<ShardTensor>> per_rank(world_size);
  for (const auto& t : tensors) {
    TensorRecord rec{t.dtype, t.shape, {}};
    const bool whole = t.chunks.size() == 1;
    for (size_t i = 0; i < t.chunks.size(); ++i) {
      const uint32_t rank = static_cast<uint32_t>(i % world_size);
      std::string key = whole ? t.name : t.name + "@" + std::to_string(i);
      Box whole_box = Box::whole(t.shape);
      per_rank[rank].push_back(
          {key, t.dtype, t.chunks[i].sizes,
           extract_naive(t.global, whole_box, t.chunks[i], element_bytes(t.dtype))});
      rec.chunks.push_back({shard_file_name(rank, world_size), key, t.chunks[i]});
    }
    m.tensors.emplace(t.name, std::move(rec));
  }
  for (uint32_t r = 0; r < world_size; ++r) {
    const std::string file = shard_file_name(r, world_size);
    const std::string path = step_dir + "/" + file;
    write_safetensors(path, per_rank[r]);
    auto& fs = PosixFilesystem::instance();
    FileRecord rec = block_bytes != 0 ? file_checksums(fs, path, block_bytes).value()
                                      : FileRecord{"", 0, file_xxh3_128(fs, path).value(), 0};
    rec.path = file;
    rec.size = fs.file_size(path).value();
    rec.rank = r;
    m.files.push_back(std::move(rec));
    m.ranks.push_back(
        {"rng-" + std::to_string(r), "{\"batch\":" + std::to_string(r) + "}", "null"});
  }
  if (commit) {
    std::ofstream out(step_dir + "/" + std::string(kManifestName), std::ios::trunc);
    out << manifest_to_json(m);
  }
  return m;
}

}  // namespace shardguard::checkpoint::testing
