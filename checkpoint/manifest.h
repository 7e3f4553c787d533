// The records that tie a checkpoint's shards together: each rank's sidecar
// (rank-NNNNN.json) and the manifest (manifest.json), with strict JSON (de)serialisation.
// A manifest is the commit point: a checkpoint is complete if and only if its manifest
// parses and every file it lists has the listed size (and checksum).
//
// Format versions (the "version" field of both records):
//   1  files with size and whole-file XXH3-128.
//   2  adds, per file, the XXH3-64 of every fixed-size block ("block_bytes",
//      "block_xxh3": 16 hex digits each), which the reader checks on the blocks a read
//      touches. A file record without them is allowed (it is then checked whole, as in 1).
// This build writes 2 and reads 1 and 2; a higher version is kUnsupported ("written by a
// newer shardguard"), never corruption. "attempt" is the epoch that wrote the record
// (SHARDGUARD_ATTEMPT: one number per launch, on every node) and fences commits; both
// versions keep that one name for it.
//
// Adding a field: until a release writes version 2, new fields may join version 2. Make
// them optional (absent = today's behaviour), write them only when set, and read them with
// JsonFields::optional() so that every version-2 file stays readable. Once version 2 is
// released, a field that older binaries would reject (the parser is strict: unknown fields
// are errors) needs version 3, which older binaries report as "newer", not corrupt.
//
// Optional fields of version 2 (absent when empty):
//   ranks[i].tree, global.tree  the structure of a saved state (nested dicts, lists,
//     tuples, numbers, strings, None) with tensors as references to entries of "tensors"
//     and how each was written (replicated and split across ranks, or one rank's shard).
//     Written and read by the clients (hooks/python/shardguard/_tree.py documents the
//     encoding); shardguard itself only stores it.
//
// User-supplied JSON (data loader position, user state, LR schedule, trees) is kept as
// serialised JSON text so that Boost.JSON stays out of this header. Thread-safety: plain
// values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/box.h"
#include "checkpoint/dtype.h"
#include "core/result.h"

namespace shardguard::checkpoint {

// The version this build writes, and the oldest it reads.
inline constexpr int kManifestVersion = 2;
inline constexpr int kOldestManifestVersion = 1;

// Block checksums (format 2): the writer's default block size, and the sizes a record may
// carry (powers of two, so blocks start on O_DIRECT boundaries; bounded, so that checking
// one block needs bounded memory).
inline constexpr uint64_t kDefaultChecksumBlockBytes = 2ull << 20;
inline constexpr uint64_t kMinChecksumBlockBytes = 4096;
inline constexpr uint64_t kMaxChecksumBlockBytes = 64ull << 20;
inline constexpr bool valid_checksum_block_bytes(uint64_t b) {
  return b >= kMinChecksumBlockBytes && b <= kMaxChecksumBlockBytes && (b & (b - 1)) == 0;
}
// Blocks of `block_bytes` covering `file_size` bytes; the last one may be shorter.
inline constexpr uint64_t checksum_block_count(uint64_t file_size, uint64_t block_bytes) {
  return file_size / block_bytes + (file_size % block_bytes != 0 ? 1 : 0);
}

enum class SaveReason { kPeriodic, kEmergency, kFinal, kManual };
std::string_view save_reason_name(SaveReason reason);
Result<SaveReason> parse_save_reason(std::string_view text);

// One piece of a tensor stored in one file under one key.
struct ChunkRecord {
  std::string file;  // relative to the step directory
  std::string key;   // tensor name inside that safetensors file
  Box box;           // the part of the global tensor it holds
};

struct TensorRecord {
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;  // global shape
  std::vector<ChunkRecord> chunks;
};

struct FileRecord {
  std::string path;      // relative to the step directory
  uint64_t size = 0;     // bytes
  std::string xxh3_128;  // 32 lower-case hex digits of XXH3-128 over the whole file
  uint32_t rank = 0;     // the rank that wrote it
  // Format 2: XXH3-64 of each block of block_bytes bytes, in file order (the last block
  // may be shorter). block_bytes == 0: none (format 1, or a file listed without them).
  uint64_t block_bytes = 0;
  std::vector<uint64_t> block_xxh3{};

  bool has_block_sums() const { return block_bytes != 0; }
};

// Per-rank state that must come back for a bit-exact resume.
struct RankState {
  std::string rng;            // opaque RNG bytes, base64 in JSON
  std::string data_position;  // JSON text (data loader position), "null" if unset
  std::string user;           // JSON text, "null" if unset
  std::string tree{};         // format 2, optional: JSON text of this rank's state tree, "" if none
};

// State of the whole job, set by rank 0.
struct GlobalState {
  uint64_t step = 0;
  std::string lr_schedule = "null";  // JSON text
  std::string user = "null";         // JSON text
  std::string tree{};                // format 2, optional: JSON text of the state tree, "" if none
};

// What one rank writes beside its shard: enough for the committer to build the manifest.
struct Sidecar {
  int version = kManifestVersion;
  std::string job_id;
  uint64_t step = 0;
  uint64_t attempt = 0;  // the epoch that wrote it
  uint32_t rank = 0;
  uint32_t world_size = 0;
  FileRecord file;
  // Tensor name -> its chunks in this rank's file (with dtype and global shape).
  std::map<std::string, TensorRecord> tensors;
  RankState state;
  std::optional<GlobalState> global;  // rank 0 only
};

struct Manifest {
  int version = kManifestVersion;
  std::string job_id;
  uint64_t step = 0;
  uint64_t attempt = 0;  // the epoch that committed it
  SaveReason reason = SaveReason::kPeriodic;
  uint32_t world_size = 0;
  int64_t created_unix_ms = 0;
  std::vector<FileRecord> files;
  std::map<std::string, TensorRecord> tensors;
  std::vector<RankState> ranks;  // index = rank
  GlobalState global;

  uint64_t total_bytes() const;
  const FileRecord* find_file(std::string_view path) const;
};

// Renders `sidecar.version`; block sums are written from version 2 on.
std::string sidecar_to_json(const Sidecar& sidecar);
// Strict: unknown or missing fields, wrong types, unsafe paths, bad boxes and block sums
// that do not fit the file's size are kCorrupt errors naming the field; `source` names the
// file in messages. A version newer than this build reads is kUnsupported (and only that):
// "<source>: written by a newer shardguard (format 3; this build reads up to 2)".
Result<Sidecar> parse_sidecar(std::string_view json, std::string_view source);

// Renders `manifest.version`; block sums are written from version 2 on.
std::string manifest_to_json(const Manifest& manifest);
// Strict, as parse_sidecar (kUnsupported for a newer version); also checks that every chunk
// names a listed file, that each tensor's chunks tile its shape, and that `ranks` has
// world_size entries.
Result<Manifest> parse_manifest(std::string_view json, std::string_view source);

// Hex of an XXH3-128 digest, high 64 bits first (the canonical order).
std::string xxh3_128_hex(uint64_t high, uint64_t low);
// 16 lower-case hex digits of a 64-bit value (a block's XXH3-64), and back (nullopt unless
// exactly 16 lower-case hex digits).
std::string u64_hex(uint64_t value);
std::optional<uint64_t> parse_u64_hex(std::string_view text);

std::string base64_encode(std::string_view bytes);
Result<std::string> base64_decode(std::string_view text);

}  // namespace shardguard::checkpoint
