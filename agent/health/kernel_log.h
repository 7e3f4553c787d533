// Incremental readers of the kernel log, for the XID check: /dev/kmsg (non-blocking, from
// its end by default) or a text log file (kern.log, a dmesg dump; tests use one). Each
// read_new() returns the complete lines logged since the previous call.
//
// Thread-safety: none; one reader belongs to one check on the loop thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/result.h"

namespace shardguard::agent {

class KernelLogReader {
 public:
  virtual ~KernelLogReader() = default;
  // The message text of each line logged since the last call (the kmsg "pri,seq,ts;" prefix
  // removed). kUnsupported when the log cannot be read here (missing, no privilege): the
  // caller reports "not available" and may try again later.
  virtual Result<std::vector<std::string>> read_new() = 0;
};

// /dev/kmsg (or `path` in the same record format). Opened on the first read; unless
// `from_start`, records already in the ring buffer are skipped. Lost records (EPIPE, the
// ring wrapped) are skipped over, not an error.
std::unique_ptr<KernelLogReader> make_kmsg_reader(std::string path = "/dev/kmsg",
                                                  bool from_start = false);

// A text file that grows by appending; a file that shrank (rotated, truncated) is read again
// from its start. Unless `from_start`, what the file holds at the first read is skipped.
// A trailing line without '\n' waits for the next call.
std::unique_ptr<KernelLogReader> make_file_log_reader(std::string path, bool from_start = false);

}  // namespace shardguard::agent
