// The last lines of a rank's log (<run-dir>/attempt-NNN/rank-R.log), for `shardguard run` to
// print when a rank fails before its first heartbeat: a Python traceback or a missing
// library then shows on the console, not only in a file the user has to find.
//
// The read is bounded (at most `max_bytes` from the end of the file, whatever its size), a
// partial first line of that window is dropped, and lines are cut to a bounded width, so a
// rank that wrote gigabytes or binary noise cannot flood the console or the supervisor's
// memory. Thread-safety: pure functions over an injected Filesystem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/filesystem.h"
#include "core/result.h"

namespace shardguard::supervisor {

struct LogTailOptions {
  size_t max_lines = 20;
  size_t max_bytes = 64 * 1024;  // read from the end of the file
  size_t max_line_bytes = 400;   // longer lines are cut, with "..." appended
};

struct LogTail {
  std::vector<std::string> lines;  // oldest first, without newlines
  uint64_t file_size = 0;
  bool earlier_lines = false;  // the file has lines before these
};

// The last lines of `path`. A final line without a newline counts; control characters
// other than tab are shown as '?'. kNotFound (naming the file) when it does not exist.
Result<LogTail> rank_log_tail(Filesystem& fs, const std::string& path,
                              const LogTailOptions& options = {});

// <run_dir>/attempt-NNN/rank-R.log: where NodeRunner sends rank R's stdout and stderr.
std::string rank_log_path(const std::string& run_dir, uint64_t attempt, uint32_t rank);

// The console block: "rank 1 (exit code 1) failed before its first heartbeat; the last 3
// lines of <path>:" followed by the lines, each indented with "  | ". `why` describes the
// exit ("exit code 1", "killed by SIGSEGV").
std::string format_rank_log_tail(uint32_t rank, const std::string& why, const std::string& path,
                                 const LogTail& tail);

}  // namespace shardguard::supervisor
