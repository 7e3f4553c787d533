// Where a run resumes from, read from its checkpoint directory and its events: the
// checkpoint an attempt starts from, the steps `run --resume-from` sets aside, and the first
// attempt number. Plain functions over a Filesystem: the shell runs them (choose_resume on
// its worker, since checksums may read hundreds of GB), the tests call them directly.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/catalog.h"
#include "core/clock.h"
#include "core/filesystem.h"
#include "core/result.h"
#include "storage/store.h"
#include "supervisor/event_log.h"
#include "supervisor/machine_events.h"

namespace shardguard::supervisor {

struct ResumeChoice {
  std::optional<checkpoint::CatalogEntry> chosen;  // none: a fresh start
  std::vector<checkpoint::CatalogEntry> skipped;   // newer ones passed over, each with its reason
  std::string error;                               // the directory could not be listed
};

// The newest complete checkpoint of `dir` not in `skip` (restarts from those made no
// progress); steps at or after `skip_from` (the divergence guard's suspect range) are neither
// chosen nor reported.
ResumeChoice choose_resume(Filesystem& fs, const std::string& dir, checkpoint::Verify verify,
                           const std::vector<uint64_t>& skip, std::optional<uint64_t> skip_from);
ResumeChoice choose_resume(storage::Store& store, checkpoint::Verify verify,
                           const std::vector<uint64_t>& skip, std::optional<uint64_t> skip_from);

// What the decision core is told of a choice: the chosen step and its manifest (none: a
// fresh start), and whether a complete checkpoint was among those skipped.
event::ResumeFound resume_found(Epoch epoch, const ResumeChoice& choice);

// `run --resume-from STEP` (`step`): every newer checkpoint is quarantined, so that a later
// crash cannot undo the rollback; STEP must be complete. `run --resume-from none` (`step`
// empty): with `fresh`, every checkpoint is set aside; without, a directory holding any is
// refused. Returns the steps set aside, newest first; each is logged.
Result<std::vector<uint64_t>> roll_back(Filesystem& fs, const std::string& dir,
                                        std::optional<uint64_t> step, bool fresh, WallTime now);
Result<std::vector<uint64_t>> roll_back(storage::Store& store, std::optional<uint64_t> step,
                                        bool fresh, WallTime now);

// Attempt numbers keep growing across `shardguard run` invocations on the same run directory
// and checkpoints, so that fencing can tell a zombie of an earlier run from the current one:
// one more than any in the run directory's events (`past`) or in a manifest of `dir`. A line
// that is not ours (a hand-edited file) is passed over.
Epoch first_epoch(Filesystem& fs, std::span<const EventRecord> past, const std::string& dir);
// The same over a Store; in a bucket an attempt's keys that never committed count too.
Epoch first_epoch(storage::Store& store, std::span<const EventRecord> past);

// How long the last save committed in `past` took (its "checkpoint_committed" seconds), for
// the save-window check at start; nullopt when none is recorded.
std::optional<Duration> last_save_time(std::span<const EventRecord> past);

}  // namespace shardguard::supervisor
