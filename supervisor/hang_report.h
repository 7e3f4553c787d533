// What a hung rank was doing, for the post-mortem: state, wchan and kernel stack from
// /proc for every process of its group, and a native stack from gdb when one is installed.
// Thread-safety: a pure read of /proc; may block up to `gdb_timeout` while gdb runs.
#pragma once

#include <sys/types.h>

#include <string>

#include "core/clock.h"

namespace shardguard::supervisor {

// A text report on the processes of group `pgid` (led by `pid`).
std::string collect_hang_report(pid_t pid, pid_t pgid, Duration gdb_timeout);

}  // namespace shardguard::supervisor
