// Opening a file that must be a regular one, where a neighbour may have put something else
// at its name: a FIFO (an open for writing without a reader blocks, one for reading blocks on
// the first read), a device, a link. The descriptor is opened with O_NONBLOCK and
// O_NOFOLLOW, checked with fstat, and then made blocking again, so nothing at the path can
// hang the caller or lead it elsewhere.
//
// Thread-safety: a free function.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "core/result.h"

namespace shardguard {

// Whether a symbolic link at the path's last component is followed: never in a directory
// others may write into (a run directory, a checkpoint); a file the user named on the command
// line (a config, a trace) may be one.
enum class LinkPolicy { kRefuse, kFollow };

// open(2) of `path` with `flags` (O_NONBLOCK and O_CLOEXEC are added, and O_NOFOLLOW unless
// kFollow) and `mode`; the descriptor, or an error that names `what` and the path: kInvalid
// for something that is not a regular file ("is a FIFO, not a regular file") or for a link,
// an errno error otherwise.
Result<int> open_regular(const std::string& path, int flags, mode_t mode, const std::string& what,
                         LinkPolicy links = LinkPolicy::kRefuse);

// The whole of the regular file at `path`, opened as above; kInvalid naming `what` when it
// holds more than `max_bytes` (/dev/zero given as a file is refused as a device, a huge file
// for its size).
Result<std::string> read_regular_file(const std::string& path, size_t max_bytes,
                                      const std::string& what,
                                      LinkPolicy links = LinkPolicy::kRefuse);

}  // namespace shardguard
