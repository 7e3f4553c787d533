// Process trees as /proc shows them: what a launched rank left running, found by its
// parent links (PPid), its process group, its PID namespace's init, its cgroup, and a
// marker in its environment, so that teardown can kill every descendant and not only a
// process group (a `setsid` or double-forked descendant leaves the group; an orphan is
// re-parented to this process when it is a child subreaper).
//
// Also the checks the supervisor needs for peers of its control socket: SO_PEERCRED gives
// host pids, and is_descendant_of() / ProcessTree::contains() say whether such a pid
// belongs to a launched rank.
//
// Thread-safety: the free functions read /proc and keep no state. ProcessTree is
// thread-safe (a mutex guards the pids it has seen).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"

namespace shardguard::io {

// One line of /proc/PID/stat, the fields teardown needs.
struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgid = 0;
  pid_t sid = 0;
  char state = '?';         // 'R', 'S', 'Z' (zombie: dead, waiting for its reaper)...
  uint64_t start_time = 0;  // field 22: clock ticks after boot; with the pid, an identity
};

// Parses the text of /proc/PID/stat (the command name may hold spaces and parentheses).
std::optional<ProcInfo> parse_proc_stat(pid_t pid, std::string_view text);
// Reads /proc/PID/stat. kNotFound once the process is gone (and reaped).
Result<ProcInfo> read_proc_info(pid_t pid);
// Field 22 of /proc/PID/stat; nullopt once the process is gone.
std::optional<uint64_t> process_start_time(pid_t pid);

// Every process at one moment (one pass over /proc), with the children of each.
class ProcessTable {
 public:
  static ProcessTable scan();
  const ProcInfo* find(pid_t pid) const;
  // `pid` with the same start time: the same process, not a later one reusing its pid.
  const ProcInfo* find_same(pid_t pid, uint64_t start_time) const;
  const std::vector<pid_t>& children_of(pid_t pid) const;
  // `roots` (those that exist) and every process below them, each once, roots first.
  std::vector<pid_t> closure(const std::vector<pid_t>& roots) const;
  const std::map<pid_t, ProcInfo>& all() const { return procs_; }

 private:
  std::map<pid_t, ProcInfo> procs_;
  std::map<pid_t, std::vector<pid_t>> children_;
};

// `root` and every process below it by PPid now (zombies included); empty if `root` is gone.
std::vector<pid_t> pids_of_tree(pid_t root);
// True if `ancestor` is the parent, grandparent... of `pid` now. False for pid == ancestor
// and when either is gone. An orphan re-parented away from `ancestor` is no longer below
// it: ProcessTree::contains() also knows those.
bool is_descendant_of(pid_t pid, pid_t ancestor);
// True if /proc/PID/environ holds exactly the entry `name=value` (false when unreadable).
bool environ_has(pid_t pid, std::string_view entry);
// The value of `name` in /proc/PID/environ (the environment it was started with); nullopt
// when absent or unreadable (another user's process, a zombie).
std::optional<std::string> environ_value(pid_t pid, std::string_view name);

// The name of the environment variable that marks every process a PosixProcessLauncher
// starts (and, by inheritance, its descendants): "<launcher pid>.<launcher start>.<n>".
inline constexpr std::string_view kTreeMarkerVariable = "SHARDGUARD_PROCESS_TREE";

// One launched process and everything it started, identified so that it can still be found
// after the launched process itself has exited and been reaped (a rank's leftovers).
class ProcessTree {
 public:
  struct Identity {
    pid_t leader = 0;  // host pid of the launched program (the rank)
    uint64_t leader_start = 0;
    pid_t init = 0;  // host pid of its PID namespace's init; 0 without one
    uint64_t init_start = 0;
    std::string marker;  // value of SHARDGUARD_PROCESS_TREE in its environment
    std::string cgroup;  // cgroup v2 directory it was started in; empty: none
  };
  explicit ProcessTree(Identity identity) : id_(std::move(identity)) {}

  const Identity& identity() const { return id_; }
  // The tree's processes in `table` (dead ones waiting for a reaper included): the leader
  // and the namespace init (same pid and start time), the cgroup's processes, those seen
  // before (same pid and start time), this process's orphaned children that carry the
  // marker, and everything below them. Remembers them, so a process seen once is still
  // found after its parent is killed and it is re-parented to this subreaper.
  std::vector<pid_t> members(const ProcessTable& table);
  std::vector<pid_t> members() { return members(ProcessTable::scan()); }
  // Whether `pid` belongs to the tree now (see members()); for peers of the control socket.
  bool contains(pid_t pid);

 private:
  Identity id_;
  std::mutex mu_;
  std::set<std::pair<pid_t, uint64_t>> seen_;  // guarded by mu_
};

}  // namespace shardguard::io
