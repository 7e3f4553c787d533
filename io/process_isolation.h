// What this machine offers to keep a launched tree together, probed at run time: PID
// namespaces (as root, or through an unprivileged user namespace) and a writable
// ("delegated") cgroup v2 subtree, found from /proc/self/mountinfo and /proc/self/cgroup
// (never an assumed path: on hybrid hosts v2 sits at /sys/fs/cgroup/unified). And a cgroup
// per attempt: everything started in it is listed in cgroup.procs and killed at once with
// cgroup.kill, even a tree whose supervisor was SIGKILLed (sweep_cgroups at the next start).
//
// Thread-safety: no shared state; a Cgroup is a plain value (its directory).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/result.h"

namespace shardguard::io {

struct CgroupSupport {
  std::string mount;      // where the cgroup2 hierarchy is mounted; empty: not mounted
  std::string own;        // this process's cgroup directory in it; empty: not visible
  bool writable = false;  // child cgroups can be made in `own` and processes moved into them
  bool has_kill = false;  // cgroup.kill exists (Linux 5.14+)
  std::string why;        // what is missing, when not writable
};

struct IsolationSupport {
  bool pid_namespace = false;       // Isolation::kPidNamespace works here
  bool via_user_namespace = false;  // ... only inside a new user namespace (not root)
  std::string pid_namespace_why;    // why not, when not
  CgroupSupport cgroup;
  // One line for the log, e.g. "PID namespaces: yes (root); cgroup v2: /sys/fs/cgroup/
  // unified/ (writable, cgroup.kill)".
  std::string describe() const;
};

// Where the cgroup2 hierarchy is mounted and this process's directory in it, from the
// texts of /proc/self/mountinfo and /proc/self/cgroup (`why` says what is missing);
// `writable` and `has_kill` are left for probe_cgroup_v2() to check.
CgroupSupport parse_cgroup_v2(std::string_view mountinfo, std::string_view self_cgroup);
// Reads the mount table and this process's cgroup; checks access, creates nothing.
CgroupSupport probe_cgroup_v2();
// Starts (and reaps) a child in new namespaces to see what the kernel permits, and probes
// the cgroups. Takes a few milliseconds: call it once at start-up.
IsolationSupport probe_isolation();

// One cgroup v2 directory, e.g. one per attempt: pass path() as ProcessSpec::cgroup for
// each rank, then kill_and_remove() at teardown.
class Cgroup {
 public:
  // Makes `parent`/`name`. kInvalid for a name that is empty, has a '/' or starts with
  // '.'; the error names the directory otherwise (EACCES where it is not delegated).
  static Result<Cgroup> create(const std::string& parent, const std::string& name);
  // An existing directory (e.g. found by a sweep).
  static Cgroup at(std::string path) { return Cgroup(std::move(path)); }

  const std::string& path() const { return path_; }
  // The processes in it now (cgroup.procs).
  std::vector<pid_t> procs() const;
  // Kills every process in it (cgroup.kill; without it SIGKILL to each in cgroup.procs,
  // again until none is left), waits until it is empty, then removes the directory.
  // kTimeout if processes remain after `timeout`.
  Status kill_and_remove(Duration timeout = std::chrono::seconds(10)) const;

 private:
  explicit Cgroup(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Kills and removes every child cgroup of `parent` whose name starts with `prefix`
// (attempts of a supervisor that died); returns how many were removed.
Result<size_t> sweep_cgroups(const std::string& parent, const std::string& prefix,
                             Duration timeout = std::chrono::seconds(10));

}  // namespace shardguard::io
