// Every file name of a checkpoint directory is made and parsed here, and nowhere else.
//
//   <checkpoint_dir>/
//     step-000001200/                        one directory per step (9+ digits)
//       shard-00000-of-00008.safetensors     rank 0's tensors (a plain safetensors file)
//       rank-00000.json                      rank 0's sidecar: file, size, checksum, chunks, state
//       ...
//       manifest.json                        written last: the commit point
//       model.safetensors.index.json         HF index, when every tensor is whole in one file
//     step-000001500/ ...
//
// Temporary files carry the writer's attempt and pid (".tmp.a<attempt>.<pid>") so stale ones
// are recognised and removed. Recovery parses names, it never trusts them: a name that does
// not parse is not ours. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace shardguard::checkpoint {

inline constexpr std::string_view kManifestName = "manifest.json";
inline constexpr std::string_view kHfIndexName = "model.safetensors.index.json";

std::string step_dir_name(uint64_t step);                   // "step-000001200"
std::optional<uint64_t> parse_step_dir_name(std::string_view name);

std::string shard_file_name(uint32_t rank, uint32_t world_size);  // "shard-00000-of-00008.safetensors"
struct ShardName {
  uint32_t rank;
  uint32_t world_size;
};
std::optional<ShardName> parse_shard_file_name(std::string_view name);

std::string sidecar_name(uint32_t rank);  // "rank-00000.json"
std::optional<uint32_t> parse_sidecar_name(std::string_view name);

// "<final>.tmp.a<attempt>.<pid>"
std::string temp_name(std::string_view final_name, uint64_t attempt, int pid);
bool is_temp_name(std::string_view name);

// True for a path that may appear in a manifest: relative, not empty, no "..", no ".",
// no empty component, no backslash or NUL.
bool is_safe_relative_path(std::string_view path);

}  // namespace shardguard::checkpoint
