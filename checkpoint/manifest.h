// The records that tie a checkpoint's shards together: each rank's sidecar
// (rank-NNNNN.json) and the manifest (manifest.json, format version 1), with strict JSON
// (de)serialisation. A manifest is the commit point: a checkpoint is complete if and only if
// its manifest parses and every file it lists has the listed size (and checksum).
//
// User-supplied JSON (data loader position, user state, LR schedule) is kept as serialised
// JSON text so that Boost.JSON stays out of this header. Thread-safety: plain values.
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

inline constexpr int kManifestVersion = 1;

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
};

// Per-rank state that must come back for a bit-exact resume.
struct RankState {
  std::string rng;            // opaque RNG bytes, base64 in JSON
  std::string data_position;  // JSON text (data loader position), "null" if unset
  std::string user;           // JSON text, "null" if unset
};

// State of the whole job, set by rank 0.
struct GlobalState {
  uint64_t step = 0;
  std::string lr_schedule = "null";  // JSON text
  std::string user = "null";         // JSON text
};

// What one rank writes beside its shard: enough for the committer to build the manifest.
struct Sidecar {
  std::string job_id;
  uint64_t step = 0;
  uint64_t attempt = 0;
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
  uint64_t attempt = 0;
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

std::string sidecar_to_json(const Sidecar& sidecar);
// Strict: unknown or missing fields, wrong types, unsafe paths and bad boxes are kCorrupt
// errors naming the field; `source` names the file in messages.
Result<Sidecar> parse_sidecar(std::string_view json, std::string_view source);

std::string manifest_to_json(const Manifest& manifest);
// Strict, as parse_sidecar; also checks that every chunk names a listed file, that each
// tensor's chunks tile its shape, and that `ranks` has world_size entries.
Result<Manifest> parse_manifest(std::string_view json, std::string_view source);

// Hex of an XXH3-128 digest, high 64 bits first (the canonical order).
std::string xxh3_128_hex(uint64_t high, uint64_t low);

std::string base64_encode(std::string_view bytes);
Result<std::string> base64_decode(std::string_view text);

}  // namespace shardguard::checkpoint
