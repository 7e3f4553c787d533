// The commit: turns the ranks' sidecars of one step into manifest.json, the single fact
// that makes a checkpoint complete.
//
// The committer (rank 0, or the supervisor when rank 0 is gone) waits until every rank of
// the world has published its sidecar, checks them against each other (same job, step,
// attempt and world size; every shard present with its size; chunks of each tensor tiling
// its shape), writes the HF index when every tensor is whole, then manifest.json, created only
// if absent (a directory: temp, fsync, rename without replacing, fsync dir; a bucket: one PUT
// with If-None-Match: *, the last request of the save), and in a directory finally removes
// files of older attempts.
// Fencing: a sidecar or manifest of a newer attempt means this committer is stale.
// Committing a committed step returns the existing manifest (idempotent).
// Thread-safety: independent calls may run on different threads.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "checkpoint/manifest.h"
#include "core/clock.h"
#include "core/filesystem.h"
#include "core/result.h"
#include "storage/store.h"

namespace shardguard::checkpoint {

struct CommitOptions {
  std::string checkpoint_dir;  // for the Filesystem overloads; a Store knows its location
  std::string job_id = "job";
  uint64_t step = 0;
  uint64_t attempt = 0;
  uint32_t world_size = 1;
  SaveReason reason = SaveReason::kPeriodic;
  Duration timeout = std::chrono::seconds(300);  // for all sidecars to appear
  Duration poll_interval = std::chrono::milliseconds(20);
  // Asked between polls: a reason stops the wait with kCancelled (another rank's save failed,
  // the request moved to a later step, the supervisor said stop).
  std::function<std::optional<std::string>()> cancelled;
  // Called every `report_every` while waiting, naming the ranks still missing.
  std::function<void(const std::string& missing)> on_waiting;
  Duration report_every = std::chrono::seconds(5);
};

// Waits for the sidecars and commits. kTimeout names the ranks still missing (and why:
// absent, or from another attempt); kFenced when a newer attempt owns the step; kExists when
// another writer of another attempt committed the step first (never overwritten); kCorrupt
// when sidecars disagree or a shard is missing or has the wrong size; kCancelled when
// `cancelled` gave a reason.
// `sleep` is how the wait passes time (tests pass one that advances a FakeClock).
Result<Manifest> commit_checkpoint(storage::Store& store, Clock& clock,
                                   const CommitOptions& options,
                                   const std::function<void(Duration)>& sleep = {});
// In the directory options.checkpoint_dir.
Result<Manifest> commit_checkpoint(Filesystem& fs, Clock& clock, const CommitOptions& options,
                                   const std::function<void(Duration)>& sleep = {});

// One look, no waiting: the manifest if every sidecar is there and valid; kNotFound with
// the reason when some are missing.
Result<Manifest> try_commit_checkpoint(storage::Store& store, Clock& clock,
                                       const CommitOptions& options);
Result<Manifest> try_commit_checkpoint(Filesystem& fs, Clock& clock,
                                       const CommitOptions& options);

}  // namespace shardguard::checkpoint
