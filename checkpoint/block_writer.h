// Writes a file image described as segments (header bytes, then tensors) with several
// threads in large aligned blocks, while the calling thread computes, in one pass over the
// image in order, its XXH3-128 and the XXH3-64 of each checksum block (format 2). Internal
// to the shard writer. Thread-safety: one call at a time per
// file; it starts and joins its own threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "core/filesystem.h"
#include "core/result.h"

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
};

// What the hashing pass found.
struct FileChecksums {
  std::string xxh3_128;  // hex, as in FileRecord
  uint64_t block_bytes = 0;
  std::vector<uint64_t> block_xxh3;
};

// Writes `segments` (contiguous, in offset order, covering [0, file_size)) to a new file
// at `path`, fsyncs and closes it, and returns the checksums of its bytes. On failure the
// file is removed.
Result<FileChecksums> write_file_image(Filesystem& fs, const std::string& path,
                                       std::span<const Segment> segments, uint64_t file_size,
                                       const BlockWriteOptions& options);

// Copies `segments` into `dst` (file_size bytes), in parallel with `threads` threads.
void copy_image(std::span<const Segment> segments, std::byte* dst, int threads);

}  // namespace shardguard::checkpoint
