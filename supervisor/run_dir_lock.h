// One supervisor per run directory. A run directory holds what one running job writes
// (events.jsonl, the control socket its ranks connect to, the record of launched processes
// that the next start sweeps): two supervisors on one would append to one event log, and the
// second's sweep and socket would hit the first's live ranks. So every `shardguard run` and
// `shardguard coordinator` takes `<run dir>/lock` (flock, for the life of the process)
// before it touches anything else there, and a second one is refused with exit 78, naming
// the holder. The lock ends with its process, however it ends: a directory left by a run
// that was killed is free at once, and what that run left is then safe to sweep.
//
//   <run dir>/lock (text; rewritten by each holder, never trusted for more than a message):
//     pid 4242 host node-3 since_unix_ms 1764650000000
//
// Where the filesystem has no flock (some NFS mounts), the run goes on with a warning: the
// sweep still never touches a running job's processes (io/process_record.h).
#pragma once

#include <memory>
#include <string>

#include "core/clock.h"
#include "core/filesystem.h"
#include "core/result.h"

namespace shardguard::supervisor {

std::string run_dir_lock_path(const std::string& run_dir);

// Creates the run directory if needed and takes its lock: the lock (held until destroyed),
// or nullptr where the filesystem offers none (logged). kFenced when another process holds
// it: "run directory 'D' is in use by another shardguard (pid P on host H since T); ...".
Result<std::unique_ptr<FileLock>> claim_run_dir(Filesystem& fs, const Clock& clock,
                                                const std::string& run_dir);

}  // namespace shardguard::supervisor
