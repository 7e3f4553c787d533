// Internal to io/: what this process has launched. Teardown reaps the dead orphans of a
// tree, but never a process whose ChildProcess will reap it (that would lose its exit
// status), so every launched pid is registered from the moment fork returns; and the
// trees by process group, for teardown calls that only name a pgid.
#pragma once

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <string>

namespace shardguard::io {
class ProcessTree;
}

namespace shardguard::io::detail {

// Held across fork/clone, so a new child is registered before anyone can look for it.
std::unique_lock<std::mutex> lock_launches();
void register_launched_locked(pid_t pid);
// Called once the launched process has been reaped through its ChildProcess.
void unregister_launched(pid_t pid);
bool is_launched(pid_t pid);

// The tree led by process group `pgid` while its ChildProcess (or a teardown) holds it.
void register_tree(pid_t pgid, const std::shared_ptr<ProcessTree>& tree);
std::shared_ptr<ProcessTree> find_tree(pid_t pgid);

// A fresh marker value: "<this pid>.<this process's start time>.<counter>".
std::string next_tree_marker();
// "<this pid>.<this process's start time>.": the prefix of every marker it hands out.
std::string tree_marker_prefix();

// Sends `sig` to `pid` only if it is still the process that started at `start_time`
// (through a pidfd where the kernel has them, so a reused pid is never signalled).
// Returns false when that process is gone.
bool signal_same_process(pid_t pid, uint64_t start_time, int sig);

}  // namespace shardguard::io::detail
