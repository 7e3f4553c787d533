// Every file name and key under a checkpoint location, a directory or a bucket, is made and
// parsed here, and nowhere else. Keys are relative to the location (storage/location.h).
//
// A directory:
//
//   <checkpoint_dir>/
//     step-000001200/                        one directory per step (9+ digits)
//       shard-00000-of-00008.safetensors     rank 0's tensors (a plain safetensors file)
//       rank-00000.json                      rank 0's sidecar: file, size, checksum, chunks, state
//       ...
//       manifest.json                        written last: the commit point
//       model.safetensors.index.json         HF index, when every tensor is whole in one file
//     step-000001500/ ...
//     quarantine/                            steps set aside: never resumed, listed or exported
//       step-000001200-20260102T030405.123Z/ the step directory as it was, moved here, plus
//         quarantine.json                    why, when, by whom (checkpoint/quarantine.h)
//     .shardguard/                           the directory's own records, not checkpoints
//       lease.lock                           flock target; never replaced, so the lock stays
//                                            on one inode while the record is rewritten
//       lease                                the holder: job, host, pid, epoch, renewal time
//       job.json                             the job id the directory belongs to
//       history.json                         counts that outlive runs (exit-78 rule, loop breaker)
//       history.json.corrupt                 a corrupt history kept aside when it was reset
//       coordinator.json                     a multi-node coordinator's write-ahead record
//
// A bucket (s3://BUCKET/PREFIX), where nothing is renamed and no key that decides anything is
// ever overwritten:
//
//   PREFIX/
//     step-000001200/
//       a000003/                             the files of attempt 3: a zombie of an older
//         shard-00000-of-00008.safetensors   attempt or a second writer writes elsewhere, so
//         rank-00000.json                    the shards a manifest names are never clobbered
//       manifest.json                        one PUT with If-None-Match: *, the last request
//       model.safetensors.index.json         of a save; it names "a000003/shard-..." files
//     quarantine/
//       step-000001200-20260102T030405.123Z.json   a marker: the manifest as it was, and why
//     .shardguard/
//       lease                                created If-None-Match, renewed If-Match
//       job.json  history.json  coordinator.json
//
// Temporary files (a directory only) carry the writer's attempt and pid
// (".tmp.a<attempt>.<pid>") so stale ones are recognised and removed. Recovery parses names,
// it never trusts them: a name that does not parse is not ours. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace shardguard::checkpoint {

inline constexpr std::string_view kManifestName = "manifest.json";
inline constexpr std::string_view kHfIndexName = "model.safetensors.index.json";
inline constexpr std::string_view kQuarantineDirName = "quarantine";
inline constexpr std::string_view kQuarantineReasonName = "quarantine.json";
inline constexpr std::string_view kMetaDirName = ".shardguard";
inline constexpr std::string_view kLeaseLockName = "lease.lock";
inline constexpr std::string_view kLeaseRecordName = "lease";
inline constexpr std::string_view kJobIdentityName = "job.json";
inline constexpr std::string_view kDirHistoryName = "history.json";
inline constexpr std::string_view kCoordinatorStateName = "coordinator.json";  // multi-node
inline constexpr std::string_view kDirHistoryCorruptName = "history.json.corrupt";  // kept aside

// "<checkpoint_dir>/.shardguard" and "<checkpoint_dir>/.shardguard/<name>" for one of the
// k*Name records above.
std::string meta_dir(const std::string& checkpoint_dir);
std::string meta_path(const std::string& checkpoint_dir, std::string_view name);
// "<checkpoint_dir>/quarantine"
std::string quarantine_root(const std::string& checkpoint_dir);

std::string step_dir_name(uint64_t step);                   // "step-000001200"
std::optional<uint64_t> parse_step_dir_name(std::string_view name);

// A quarantined step directory: the step, the UTC time it was set aside (to the
// millisecond) and, when two land in the same millisecond, a sequence number from 2 up.
struct QuarantineName {
  uint64_t step = 0;
  int64_t unix_ms = 0;
  uint32_t seq = 1;
};
// "step-000001200-20260102T030405.123Z", with "-<seq>" appended when seq > 1.
std::string quarantine_dir_name(const QuarantineName& q);
std::optional<QuarantineName> parse_quarantine_dir_name(std::string_view name);

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

// Keys under a location (see the pictures above).
std::string step_key(uint64_t step);                                 // "step-000001200"
std::string step_file_key(uint64_t step, std::string_view file);     // "step-000001200/<file>"
std::string manifest_key(uint64_t step);                             // ".../manifest.json"
std::string meta_key(std::string_view name);                         // ".shardguard/<name>"

// How a location names a rank's files inside a step. A directory renames temp files into
// place and fences by attempt inside the sidecar, so names carry only the rank; a bucket
// cannot rename, so every attempt writes under its own "a<attempt>/" (per_attempt).
struct RankFiles {
  bool per_attempt = false;

  std::string shard(uint32_t rank, uint32_t world_size, uint64_t attempt) const;  // in the step
  std::string sidecar(uint32_t rank, uint64_t attempt) const;
};
std::string attempt_dir_name(uint64_t attempt);  // "a000003"
std::optional<uint64_t> parse_attempt_dir_name(std::string_view name);

// A bucket's quarantine marker: "quarantine/<quarantine_dir_name(q)>.json".
std::string quarantine_marker_key(const QuarantineName& q);
std::optional<QuarantineName> parse_quarantine_marker_name(std::string_view name);

}  // namespace shardguard::checkpoint
