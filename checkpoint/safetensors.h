// The safetensors file format: parse and validate a shard's header, and plan the header,
// offsets and size of a shard before writing it.
//
// Layout: 8-byte little-endian N, N bytes of UTF-8 JSON (the header), then the data, with
// tensor offsets relative to the data start (8 + N). The reader applies the reference
// implementation's validation rules in its order (shared/reference/checkpoint-formats.md
// §1.4) and additionally rejects duplicate JSON keys. The writer emits what the reference
// writer emits (compact JSON, `__metadata__` first, tensors by dtype then name, spaces to a
// multiple of 8), optionally padded further so the data starts on a page boundary.
// No I/O here: callers hand in bytes (a mapped file or its head) and write the bytes out.
// Thread-safety: pure functions over their arguments; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/dtype.h"
#include "core/result.h"

namespace shardguard::checkpoint {

// The reference reader refuses larger headers (MAX_HEADER_SIZE); so do both our sides.
inline constexpr uint64_t kMaxSafetensorsHeaderSize = 100'000'000;
// Bytes of the little-endian header length that starts every file.
inline constexpr uint64_t kSafetensorsLengthPrefix = 8;

struct TensorEntry {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;  // empty for a scalar
  uint64_t begin = 0;           // data_offsets, relative to the data start
  uint64_t end = 0;             // one past the last byte

  uint64_t byte_size() const { return end - begin; }
  bool operator==(const TensorEntry&) const = default;
};

struct SafetensorsHeader {
  std::vector<TensorEntry> tensors;             // by (begin, end); ties keep the header's order
  std::map<std::string, std::string> metadata;  // `__metadata__`, empty when absent
  uint64_t header_size = 0;                     // N: JSON bytes including padding
  uint64_t data_start = 0;                      // 8 + N: file offset of data offset 0

  // The tensor with this name, or nullptr. Linear: build a map for many lookups.
  const TensorEntry* find(std::string_view name) const;
  // Absolute file offset of the tensor's first byte.
  uint64_t file_offset(const TensorEntry& tensor) const { return data_start + tensor.begin; }
  bool operator==(const SafetensorsHeader&) const = default;
};

// Checks rules 1-3 (file at least 8 bytes, N <= 100 MB, 8 + N within the file) from the
// file's first bytes and its size, and returns N so a caller can read exactly the header.
// kCorrupt names the file; kInvalid if `first_bytes` holds fewer than 8 bytes of a file
// that has them.
Result<uint64_t> read_safetensors_header_size(std::span<const std::byte> first_bytes,
                                              uint64_t file_size, std::string_view file_name);

// Parses and validates the header given the file's first bytes (at least 8 + N of them;
// more are ignored) and the whole file's size; the data itself is not needed. kCorrupt
// messages name the file and the tensor; kInvalid if `head` is shorter than 8 + N.
Result<SafetensorsHeader> parse_safetensors_header(std::span<const std::byte> head,
                                                   uint64_t file_size, std::string_view file_name);

// Same, for a whole file in memory (e.g. mapped).
Result<SafetensorsHeader> parse_safetensors(std::span<const std::byte> file_bytes,
                                            std::string_view file_name);

// Writer side.
struct PlannedTensor {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;
};

struct SafetensorsLayout {
  SafetensorsHeader header;             // exactly what parse_safetensors will return
  std::vector<std::byte> header_bytes;  // the file's first header.data_start bytes
  uint64_t file_size = 0;               // data_start + the sum of the tensors' sizes
};

// Orders the tensors like the reference writer (dtype alignment descending, then name),
// lays them out back to back from offset 0, and renders the header. With a data_alignment
// (a power of two, e.g. 4096 for O_DIRECT) the header is padded with spaces so the data
// starts at a multiple of it; 0 means the format's own 8. kInvalid for an empty, duplicate
// or `__metadata__`-prefixed name, non-UTF-8 text, a size overflow or a too-large header.
Result<SafetensorsLayout> plan_safetensors(std::vector<PlannedTensor> tensors,
                                           std::map<std::string, std::string> metadata,
                                           uint64_t data_alignment = 0);

}  // namespace shardguard::checkpoint
