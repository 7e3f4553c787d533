// Reads a committed checkpoint (or a Hugging Face safetensors directory) back: any box of
// any tensor, assembled from every chunk that overlaps it. This is resharding: R ranks read
// what W ranks wrote, each asking for its own box.
//
// Shards are opened and mapped lazily on first use; each shard's header is read (pread) and
// checked against the manifest once (file size, and for every chunk in it: key present,
// dtype, shape equal to the chunk's box).
//
// Every byte a read returns is verified, always: a file with block checksums (format 2)
// has each block checked when a read first touches it (the header's blocks when the file is
// opened), hashed beside the copy while the block is in the CPU cache, and remembered as
// good for the reader's lifetime; a file with only a whole-file checksum (format 1) is
// hashed whole before its first use. A mismatch fails the read with kCorrupt naming the file
// and the bad block ("step-000000200/shard-00001-of-00002.safetensors: block at offset
// 4194304 (2 MiB) fails its checksum"); checksum_failure() gives the same as data.
// Hugging Face directories carry no checksums and are not verified.
//
// How bytes move: where a chunk's part of the box is made of long runs of bytes contiguous
// both in the file and in `out` (a row-split chunk read by row boxes is one such run), the
// runs are cut into requests of ReaderOptions::request_bytes, spread over io_threads
// threads. A request whose bytes are mostly in the page cache is copied from it (pread into
// `out`, or memcpy from the mapping when `out` is not aligned like the file); one that is
// not is read with O_DIRECT into a huge-page buffer and copied into `out` (see direct_io).
// Shorter runs are copied from the mapping.
// Thread-safety: all const methods may be called from any number of threads at once; the
// shard cache is guarded by a mutex. The Filesystem must outlive the reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/block_sums.h"
#include "checkpoint/box.h"
#include "checkpoint/manifest.h"
#include "core/filesystem.h"
#include "core/result.h"
#include "storage/store.h"

namespace shardguard::checkpoint {

// Largest box tensor_xxh3_64() assembles at once.
inline constexpr uint64_t kHashBlockBytes = 64ull << 20;

struct ReaderOptions {
  // Threads reading one read() call's long runs in parallel, the calling thread included.
  int io_threads = 8;
  // Long runs are read in requests of at most this many bytes.
  size_t request_bytes = 4ull << 20;
  // Runs at least this long are read with pread; shorter ones are copied from the mapping.
  size_t min_pread_bytes = 64ull << 10;
  // Requests whose bytes are mostly not in the page cache are read with O_DIRECT where the
  // filesystem allows, into 2 MiB-aligned transparent-huge-page buffers (the device then gets
  // request-sized I/Os, not ~1 MiB pieces), then copied into `out`: this skips the page
  // cache's CPU cost and does not leave the data cached, so a second load of the same bytes
  // reads the disk again. The reader keeps up to io_threads such buffers (request_bytes
  // rounded up to 2 MiB each) for reuse. Cached bytes are always read through the cache.
  // false: every request goes through the page cache.
  bool direct_io = true;
  // Also hash every file whole (XXH3-128) before its first use, as format-1 files always
  // are (the job config's resume_verify = "checksum"). Block checks happen regardless.
  bool verify_whole_files = false;
  // Told the bytes of each tensor read once they are in its `out` (a long resume's
  // progress); read_many() may call it from its reading threads.
  std::function<void(uint64_t bytes)> on_read{};
};

class CheckpointReader {
 public:
  // `path` is a step directory, its manifest.json, or a Hugging Face directory (or its
  // model.safetensors.index.json). kNotFound when it is none of these; manifest errors
  // are kCorrupt naming the file. Shards are not opened yet.
  static Result<CheckpointReader> open(Filesystem& fs, const std::string& path);
  static Result<CheckpointReader> open(Filesystem& fs, const std::string& path,
                                       const ReaderOptions& options);
  // A reader over an already parsed manifest whose files live in `dir`.
  static CheckpointReader from_manifest(Filesystem& fs, std::string dir, Manifest manifest,
                                        const ReaderOptions& options = {});
  // The committed checkpoint of `step` in `store` (a directory or a bucket), which must
  // outlive the reader. kNotFound when it has no manifest.
  static Result<CheckpointReader> open(storage::Store& store, uint64_t step,
                                       const ReaderOptions& options = {});
  static CheckpointReader from_manifest(storage::Store& store, uint64_t step, Manifest manifest,
                                        const ReaderOptions& options = {});
  // The same, keeping `store` (and what it holds: a bucket's connection) alive.
  static Result<CheckpointReader> open(std::shared_ptr<storage::Store> store, uint64_t step,
                                       const ReaderOptions& options = {});
  // A path as open(fs, path) takes, or a bucket's step URL ("s3://b/p/step-000000200", or its
  // manifest.json), reached with SHARDGUARD_S3_* and AWS's own variables and files.
  static Result<CheckpointReader> open_path_or_url(Filesystem& fs, const std::string& path,
                                                   const ReaderOptions& options = {});

  ~CheckpointReader();
  CheckpointReader(CheckpointReader&&) noexcept;
  CheckpointReader& operator=(CheckpointReader&&) noexcept;

  const Manifest& manifest() const;
  // The step directory's path, or its URL in a bucket ("s3://b/p/step-000000200").
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
  // One read() each, with the long runs of all of them read together: a cold load from a
  // bucket keeps io_threads ranged GETs in flight across tensors instead of waiting for the
  // slowest request of each tensor before the next one starts. Stops at the first error,
  // naming the tensor; `out`s of reads before it may be filled or not.
  struct TensorRead {
    std::string_view name;
    Box box;
    std::span<std::byte> out;
  };
  Status read_many(std::span<const TensorRead> reads) const;
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

  // The first checksum failure any read of this reader met (file relative to dir(),
  // offset of the bad block), or nullopt: what a resuming rank reports as
  // resume_failed{manifest, file, offset} after a read failed with kCorrupt.
  std::optional<ChecksumFailure> checksum_failure() const;

 private:
  struct Impl;
  explicit CheckpointReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::checkpoint
