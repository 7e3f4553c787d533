// Internal to io/: what a launched child needs between fork and exec, prepared before the
// fork (after it, only async-signal-safe calls: the launcher has other threads), and the two
// ways of starting it (a plain fork, or pid 2 of a new PID namespace).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "core/result.h"
#include "io/process.h"

namespace shardguard::io::detail {

struct ExecPlan {
  const char* path = nullptr;  // resolved program
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* cwd = nullptr;  // nullptr: the launcher's
  int in_fd = -1;             // -1: inherit
  int out_fd = -1;
  int err_fd = -1;
  int cgroup_procs_fd = -1;  // cgroup.procs to join before exec; -1: none
  bool die_with_parent = false;
  pid_t parent = 0;  // the launcher's pid, for the PDEATHSIG race check
};

// Where a child failed before exec; sent to the launcher on the child's error channel.
enum ChildStage : int {
  kStageSetpgid,
  kStageDup2,
  kStageChdir,
  kStageExec,
  kStageCgroup,
  kStageUserNamespace,
  kStageFork,
  kStageChannel,
};
struct ChildFailure {
  int stage;
  int err;
};

// The steps both paths take in the child right before exec: own process group, empty
// signal mask and default dispositions, stdio, working directory, close-on-exec for every
// other descriptor. Async-signal-safe. Returns the failed stage, or -1.
int prepare_child(const ExecPlan& plan);

// "launch 'prog': chdir '/x': No such file or directory" and the like.
Error launch_failure(const std::string& program, const std::string& cwd, ChildFailure failure);

// A child started as pid 2 of a new PID namespace under a small init (pid 1).
struct NamespaceChild {
  pid_t init = -1;     // host pid of the init: our child, reaped by us
  pid_t pid = -1;      // host pid of the program
  int pidfd = -1;      // pidfd of the program (-1 without pidfd_open)
  int status_fd = -1;  // the init writes the program's wait status here, then exits
  uint64_t init_start = 0;
  uint64_t start = 0;
};
// Starts `plan` in new PID and mount namespaces (and a user namespace when
// `user_namespace`). Sets *refused when the kernel does not permit the namespaces (the
// caller may fall back to a plain fork); any other error is the launch's.
Result<NamespaceChild> launch_in_pid_namespace(const ExecPlan& plan, const std::string& program,
                                               const std::string& cwd, bool user_namespace,
                                               bool* refused);

}  // namespace shardguard::io::detail
