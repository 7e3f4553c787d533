// The quarantine mark: a step directory set aside because it must not be resumed (a failed
// block check, a divergence, an operator's decision). It is moved, not deleted, to
// `<checkpoint_dir>/quarantine/step-NNNNNNNNN-<UTC time>/` with a reason file inside, so
//   - nothing picks it for resume, export or "latest" (the catalog never lists quarantine/);
//   - its step number is free again: a rolled-back run writes `step-N` anew instead of
//     rewriting a committed step in place;
//   - it stays as evidence for `quarantine_keep` (default 7 days), after which retention
//     may free it (checkpoint/retention.h).
// Every move is a rename followed by an fsync of both parent directories, so a crash leaves
// the step either in place or quarantined, never lost.
//
// A bucket has no rename: the mark is an object, `quarantine/step-N-<UTC time>.json`, holding
// the reason, the attempts whose files it sets aside and the step's manifest as it was; the
// step's manifest.json is deleted after the mark is written, which frees the step number
// (data keys carry the attempt, so a new save of step N writes beside the old files, never
// over them). A crash between the two leaves a manifest whose attempt is marked: it counts as
// quarantined, never as complete. Unquarantining puts the manifest back with If-None-Match,
// refused when the step was written again since.
//
// Callers are the directory's lease holder or an operator (`shardguard ckpt quarantine`):
// two processes must not quarantine the same step at once. Thread-safety: no shared state;
// independent calls may run on any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/filesystem.h"
#include "core/result.h"
#include "storage/store.h"

namespace shardguard::checkpoint {

// How long quarantined steps are kept before gc may free them (`[checkpoint] quarantine_keep`).
inline constexpr Duration kDefaultQuarantineKeep = std::chrono::hours(24 * 7);

struct QuarantineEntry {
  uint64_t step = 0;
  std::string dir;                  // its path now, under <checkpoint_dir>/quarantine/
  int64_t quarantined_unix_ms = 0;  // from the directory's name (the reason file may be lost)
  std::string reason;               // why, as given to quarantine_step()
  std::string who;                  // who set it aside ("shardguard ckpt quarantine ...")
  std::string problem;              // non-empty when the reason file is missing or unreadable
  uint64_t bytes = 0;               // list_quarantined(): what removing it would free
  // A bucket's mark: its key, the attempts it sets aside and the manifest it took.
  std::string key{};
  std::vector<uint64_t> attempts{};
  std::optional<std::string> manifest{};
};

// Moves `<checkpoint_dir>/step-N` aside with a reason file (reason, time, step, who) and makes
// the move durable. kNotFound when there is no such step; kInvalid when it is not a plain
// directory (a symbolic link is never followed). `who` empty: "pid P on host H".
Result<QuarantineEntry> quarantine_step(Filesystem& fs, const std::string& checkpoint_dir,
                                        uint64_t step, const std::string& reason, WallTime now,
                                        const std::string& who = "");

// Every quarantined step, oldest first. A missing quarantine/ is an empty list; a directory
// whose reason file is unreadable is listed with `problem` set; names that are not ours are
// ignored.
Result<std::vector<QuarantineEntry>> list_quarantined(Filesystem& fs,
                                                      const std::string& checkpoint_dir);

// Moves `entry` back to `<checkpoint_dir>/step-N` and drops its reason file. Refused (kInvalid,
// saying so) when `step-N` exists again: it was written since, and a step is never replaced.
Status unquarantine(Filesystem& fs, const std::string& checkpoint_dir,
                    const QuarantineEntry& entry);
// As above for the most recently quarantined copy of `step`; kNotFound when there is none.
// Returns the entry that was restored.
Result<QuarantineEntry> unquarantine_step(Filesystem& fs, const std::string& checkpoint_dir,
                                          uint64_t step);

// The same over a Store: a directory as above, a bucket by marks (see the header comment).
Result<QuarantineEntry> quarantine_step(storage::Store& store, uint64_t step,
                                        const std::string& reason, WallTime now,
                                        const std::string& who = "");
Result<std::vector<QuarantineEntry>> list_quarantined(storage::Store& store);
Status unquarantine(storage::Store& store, const QuarantineEntry& entry);
Result<QuarantineEntry> unquarantine_step(storage::Store& store, uint64_t step);
// Deletes a quarantined step for good (gc after quarantine_keep): a directory's tree, or a
// bucket's marked attempts' files and then the mark.
Status remove_quarantined(storage::Store& store, const QuarantineEntry& entry);
// A bucket's attempts of `step` set aside by marks (a directory: none, its quarantine moves
// the files away).
Result<std::set<uint64_t>> quarantined_attempts(storage::Store& store, uint64_t step);

}  // namespace shardguard::checkpoint
