// The catalog of a checkpoint directory: every step directory with its state, newest
// first, and the newest complete one to resume from. A checkpoint is complete if and only
// if its manifest.json exists, parses, names the directory's step, and every file it lists
// has the listed size (and, with Verify::kChecksum, checksum). Nothing else (no "latest"
// pointer) is trusted; names that do not parse as step directories are not ours and are
// ignored, and quarantine/ and .shardguard/ are never listed (checkpoint/quarantine.h).
// A symbolic link named like a step directory is listed; through a RootedFilesystem
// (core/rooted_fs.h, what the CLI and `shardguard run` pass) it is never looked through and
// reads as corrupt, naming the link, as does a step whose manifest or files are links.
// A bucket is listed the same way (one listing of the prefix with '/', a GET per manifest
// read); a step whose only files are attempts set aside in quarantine/ is not a step any more
// (checkpoint/quarantine.h).
// Thread-safety: pure functions over the Filesystem or Store; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/verify.h"
#include "core/filesystem.h"
#include "core/result.h"
#include "storage/store.h"

namespace shardguard::checkpoint {

enum class CheckpointState {
  kComplete,    // manifest present and every listed file checks out
  kIncomplete,  // no manifest.json: a save that never committed (or is in progress)
  kCorrupt,     // manifest unreadable or a listed file missing or different
  kNewer,       // manifest of a format newer than this build reads: not ours to judge
};
std::string_view checkpoint_state_name(CheckpointState state);  // "complete", ..., "newer"

struct CatalogEntry {
  uint64_t step = 0;
  std::string dir;  // the step directory's path, or its URL in a bucket
  CheckpointState state = CheckpointState::kIncomplete;
  std::string reason;                // why not complete, naming the file; empty if complete
  std::optional<Manifest> manifest;  // set whenever the manifest parsed
};

// Classifies one step directory. Read errors make the entry kCorrupt with the error as
// its reason (an unreadable checkpoint cannot be resumed from either). A manifest of a
// newer format is kNewer, with the reason "step-N/manifest.json: written by a newer
// shardguard (format 3; this build reads up to 2)"; resume skips it like any other state
// that is not kComplete.
CatalogEntry inspect_checkpoint(Filesystem& fs, const std::string& step_dir, uint64_t step,
                                Verify verify);

// Every step directory under `checkpoint_dir`, newest first, each classified. A missing
// `checkpoint_dir` is an empty list; an unlistable one is an error.
Result<std::vector<CatalogEntry>> list_checkpoints(Filesystem& fs,
                                                   const std::string& checkpoint_dir,
                                                   Verify verify);

// The newest complete checkpoint, verifying newest first and stopping at the first
// complete one; the newer ones passed over go to `skipped_newer` (newest first). kNotFound,
// listing what was skipped and why, when none is complete.
Result<CatalogEntry> latest_complete(Filesystem& fs, const std::string& checkpoint_dir,
                                     Verify verify,
                                     std::vector<CatalogEntry>* skipped_newer = nullptr);

// The same over a Store: a directory or a bucket.
CatalogEntry inspect_checkpoint(storage::Store& store, uint64_t step, Verify verify);
Result<std::vector<CatalogEntry>> list_checkpoints(storage::Store& store, Verify verify);
Result<CatalogEntry> latest_complete(storage::Store& store, Verify verify,
                                     std::vector<CatalogEntry>* skipped_newer = nullptr);

}  // namespace shardguard::checkpoint
