// Reading the new part of a growing text file (a kernel log, a command's output file)
// without reading all of it: one open + fstat + pread. Thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/result.h"

namespace shardguard::agent {

struct FileRange {
  uint64_t file_size = 0;  // the file's size when read
  std::string data;        // bytes [offset, min(file_size, offset + max_bytes))
};

// Reads up to `max_bytes` of `path` from `offset` (nothing when the file is shorter).
// Errors name the file (kNotFound when it does not exist).
Result<FileRange> read_file_range(const std::string& path, uint64_t offset, size_t max_bytes);

}  // namespace shardguard::agent
