// Internal to io/: the ChildProcess for a pid that PosixProcessLauncher has just started.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "io/process.h"

namespace shardguard::io::detail {

// Takes ownership of reaping `pid` (a child of this process, leader of its own group).
std::unique_ptr<ChildProcess> make_posix_child(EventLoop& loop, pid_t pid, std::string program);

}  // namespace shardguard::io::detail
