// Internal to io/: the ChildProcess for a process that PosixProcessLauncher has just started.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "io/detail/exec_plan.h"
#include "io/process.h"

namespace shardguard::io::detail {

// Takes ownership of reaping `pid` (a child of this process, leader of its own group).
std::unique_ptr<ChildProcess> make_posix_child(EventLoop& loop, pid_t pid, std::string program,
                                               std::shared_ptr<ProcessTree> tree);
// Takes ownership of reaping the namespace's init; reports the program's exit status.
std::unique_ptr<ChildProcess> make_namespace_child(EventLoop& loop, const NamespaceChild& child,
                                                   std::string program,
                                                   std::shared_ptr<ProcessTree> tree);

}  // namespace shardguard::io::detail
