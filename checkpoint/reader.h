// Reads a committed checkpoint (or a Hugging Face safetensors directory) back: any box of
// any tensor, assembled from every chunk that overlaps it. This is resharding: R ranks read
// what W ranks wrote, each asking for its own box.
//
// Shards are mapped lazily on first use; each shard's header is parsed and checked against
// the manifest once (file size, and for every chunk in it: key present, dtype, shape equal
// to the chunk's box). Checksums are not verified here (see checkpoint/verify.h).
// Thread-safety: all const methods may be called from any number of threads at once; the
// shard cache is guarded by a mutex. The Filesystem must outlive the reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/box.h"
#include "checkpoint/manifest.h"
#include "core/filesystem.h"
#include "core/result.h"

namespace shardguard::checkpoint {

// Largest box tensor_xxh3_64() assembles at once.
inline constexpr uint64_t kHashBlockBytes = 64ull << 20;

class CheckpointReader {
 public:
  // `path` is a step directory, its manifest.json, or a Hugging Face directory (or its
  // model.safetensors.index.json). kNotFound when it is none of these; manifest errors
  // are kCorrupt naming the file. Shards are not opened yet.
  static Result<CheckpointReader> open(Filesystem& fs, const std::string& path);
  // A reader over an already parsed manifest whose files live in `dir`.
  static CheckpointReader from_manifest(Filesystem& fs, std::string dir, Manifest manifest);

  ~CheckpointReader();
  CheckpointReader(CheckpointReader&&) noexcept;
  CheckpointReader& operator=(CheckpointReader&&) noexcept;

  const Manifest& manifest() const;
  const std::string& dir() const;
  // Tensor names in sorted order.
  std::vector<std::string> tensor_names() const;
  // The tensor's record, or nullptr when the checkpoint has no such tensor.
  const TensorRecord* tensor(std::string_view name) const;

  // Fills `out` (exactly the box's bytes, packed row-major) with `box` of tensor `name`.
  // kNotFound for an unknown tensor, kInvalid for a box outside the shape or a wrong
  // `out` size, kCorrupt (naming file and tensor) for a shard that disagrees with the
  // manifest. Sub-byte dtypes (F4, F6_*) can only be read whole.
  Status read(std::string_view name, const Box& box, std::span<std::byte> out) const;
  // The whole tensor.
  Result<std::vector<std::byte>> read_whole(std::string_view name) const;

  // Rank `rank`'s saved state; an empty state (rng "", JSON "null") when rank >= world size.
  const RankState& rank_state(uint32_t rank) const;
  const GlobalState& global() const;

  // XXH3-64 of the tensor's global bytes in row-major order: the same value whatever the
  // world size and chunking that wrote it. Assembles boxes of at most `block_bytes` (at
  // least one element) at a time, so memory stays bounded for large tensors.
  Result<uint64_t> tensor_xxh3_64(std::string_view name,
                                  uint64_t block_bytes = kHashBlockBytes) const;

  // Opens and checks every shard now, so a broken one fails before any read does.
  Status open_all_shards() const;

 private:
  struct Impl;
  explicit CheckpointReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::checkpoint
