// Writes a file image described as segments (header bytes, then tensors) into an Upload (a
// temp file of a directory, a multipart upload of a bucket: storage/store.h) with several
// threads in large aligned blocks, one block a part, while the calling thread computes, in
// one pass over the image in order, its XXH3-128 and the XXH3-64 of each checksum block
// (format 2). Every block is written whole and exactly: none is padded, nothing is truncated
// back afterwards; the last, shorter one goes last, after the others. Internal to the shard
// writer. Thread-safety: one call at a time per upload; it starts and joins its own threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "core/filesystem.h"
#include "core/result.h"
#include "storage/store.h"

namespace shardguard::checkpoint {

inline constexpr size_t kDirectIoAlignment = 4096;

struct Segment {
  uint64_t offset;                  // in the file
  std::span<const std::byte> data;  // its bytes
};

struct BlockWriteOptions {
  int threads = 4;
  size_t block_size = 8ull << 20;  // a multiple of kDirectIoAlignment
  bool direct_io = true;
  uint64_t checksum_block_bytes = kDefaultChecksumBlockBytes;  // valid_checksum_block_bytes()
  std::function<void(uint64_t bytes)> on_written{};  // after each block, from any thread
};

// What the hashing pass found.
struct FileChecksums {
  std::string xxh3_128;  // hex, as in FileRecord
  uint64_t block_bytes = 0;
  std::vector<uint64_t> block_xxh3;
};

// Writes `segments` (contiguous, in offset order, covering [0, file_size)) into `upload` in
// parts of options.block_size (as the upload was begun with), finishes it (durable, not yet
// published) and returns the checksums of its bytes. On failure the upload is aborted.
Result<FileChecksums> write_image(storage::Upload& upload, std::span<const Segment> segments,
                                  uint64_t file_size, const BlockWriteOptions& options);

// The part size of an image written with `options`: block_size in whole 4 KiB pages.
size_t image_part_bytes(const BlockWriteOptions& options);

// Copies `segments` into `dst` (file_size bytes), in parallel with `threads` threads.
void copy_image(std::span<const Segment> segments, std::byte* dst, int threads);

}  // namespace shardguard::checkpoint
