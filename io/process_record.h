// Leftovers of a supervisor that was SIGKILLed where neither a PID namespace nor a cgroup
// could hold its ranks' trees: each launched rank is recorded (pid and start time, field 22
// of /proc/PID/stat) in a small file in the run directory, with the launcher's tree-marker
// prefix; the next start sweeps what is still running. A recorded pid is only killed if its
// start time matches too, so a pid reused by another process is never touched.
// The record lies in a directory that others may be able to write, so a line is only a
// hint: a process is killed only when it runs as this user and carries the marker of a
// recorded launcher that is no longer running (a live job's ranks, another user's processes
// and processes no finished run launched are refused, whatever the file says).
//
//   <run dir>/processes (text, one record per line, appended; 0600):
//     launcher 4242.1234567.        every process carrying SHARDGUARD_PROCESS_TREE=4242.1234567.*
//     process 4301 1234890          pid, start time
//
// Thread-safety: no shared state; one writer per file (the supervisor's loop thread).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/result.h"
#include "io/process.h"

namespace shardguard::io {

struct RecordedProcess {
  pid_t pid = 0;
  uint64_t start_time = 0;
};

// Appends this launcher's marker prefix and `child`'s program (and namespace init) to
// `path`, creating it (0600, never through a symlink). No fsync: the file only matters
// while this boot's processes can still be running.
Status record_launched(const std::string& path, const ChildProcess& child);
// Appends any processes (e.g. io::pids_of_tree() of a rank now and then, to catch
// descendants that may lose the marker).
Status record_processes(const std::string& path, const std::vector<RecordedProcess>& processes);

struct SweepReport {
  size_t killed = 0;  // processes killed (recorded ones, their descendants, marked ones)
  size_t reused = 0;  // recorded pids now held by another process: left alone
  size_t gone = 0;    // recorded processes no longer running
  size_t refused = 0;  // recorded, running, but not a finished run's (another user's, a live
                       // job's, or carrying no recorded marker): left alone
};

// Kills what a previous run recorded in `path` and left running - each recorded process
// whose pid AND start time match, everything below it, and every process that carries a
// recorded launcher's marker (SIGSTOP until no new one appears, then SIGKILL), each of them a
// leftover as the header says - waits until
// they are gone (kTimeout after `timeout`), then removes the file. No file: nothing to do.
// Never kills this process or a process of this launcher.
Result<SweepReport> sweep_recorded(const std::string& path,
                                   Duration timeout = std::chrono::seconds(10));

}  // namespace shardguard::io
