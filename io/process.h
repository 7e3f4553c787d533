// Process seam: launching the wrapped training command and tearing down its whole tree.
// Every child starts in its own process group (its pid is the pgid), so signalling the
// group reaches grandchildren too (torchrun workers, data loader processes). The
// supervisor takes a ProcessLauncher&; production passes a PosixProcessLauncher, tests a
// fake.
//
// Thread-safety: a ChildProcess may be waited on from several threads (reaping is
// guarded), but async_wait callbacks run on the launcher's EventLoop thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/result.h"

namespace shardguard::io {

class EventLoop;

// How a process ended: an exit code, or the signal that killed it.
struct ExitStatus {
  bool signaled = false;
  int code = 0;    // valid when !signaled
  int signal = 0;  // valid when signaled
  bool core_dumped = false;

  bool success() const { return !signaled && code == 0; }
  // "exited with code 3", "killed by signal 9 (SIGKILL)", "... (core dumped)".
  std::string describe() const;
  // From a waitpid() status word.
  static ExitStatus from_wait_status(int status);
  static ExitStatus exited(int code) { return {false, code, 0, false}; }
  static ExitStatus killed(int sig) { return {true, 0, sig, false}; }
  bool operator==(const ExitStatus&) const = default;
};

struct ProcessSpec {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH when it has no '/'
  enum class EnvMode { kAdd, kReplace };
  // kAdd: the parent's environment plus (overridden by) `env`; kReplace: exactly `env`.
  EnvMode env_mode = EnvMode::kAdd;
  std::map<std::string, std::string> env;
  std::string cwd;  // empty: the parent's
  // Empty: inherit the parent's. Otherwise a file opened O_APPEND|O_CREAT (0644), never
  // truncated; stdout and stderr may name the same file.
  std::string stdout_path;
  std::string stderr_path;
  bool stdin_null = true;  // stdin from /dev/null (false: inherit)
  // SIGKILL the child when the launching process dies (PR_SET_PDEATHSIG): a rank never
  // outlives its supervisor. Note: Linux ties this to the launching thread.
  bool die_with_parent = false;
};

class ChildProcess {
 public:
  using WaitCallback = std::function<void(Result<ExitStatus>)>;
  virtual ~ChildProcess() = default;

  virtual pid_t pid() const = 0;
  virtual pid_t pgid() const = 0;
  // Sends `sig` to the child only / to its whole process group. Sending to a process that
  // has already exited is not an error (ok status).
  virtual Status signal(int sig) = 0;
  virtual Status signal_group(int sig) = 0;
  // Reaps the child if it has exited; nullopt while it runs. Idempotent after exit.
  virtual Result<std::optional<ExitStatus>> try_wait() = 0;
  // Calls `done` on the loop thread once the child has exited (at once if it already has).
  // One pending async_wait at a time; destroying the ChildProcess drops the callback.
  virtual void async_wait(WaitCallback done) = 0;
  // Blocks up to `timeout`; kTimeout if the child still runs.
  virtual Result<ExitStatus> wait_blocking(Duration timeout) = 0;
};

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts the process; returns once it has exec'd. A failure to exec (missing program,
  // bad cwd, unwritable log file) is an error naming argv[0], not an exit status:
  // "launch 'nosuchprog': No such file or directory".
  virtual Result<std::unique_ptr<ChildProcess>> launch(const ProcessSpec& spec) = 0;
};

// fork/exec launcher. Children get an empty signal mask, default signal dispositions and no
// file descriptors beyond 0-2. Destroying a ChildProcess that has not exited SIGKILLs its
// group and reaps it, so no zombie is left behind.
class PosixProcessLauncher final : public ProcessLauncher {
 public:
  explicit PosixProcessLauncher(EventLoop& loop) : loop_(loop) {}
  Result<std::unique_ptr<ChildProcess>> launch(const ProcessSpec& spec) override;

 private:
  EventLoop& loop_;
};

struct KillTreeOptions {
  Duration grace = std::chrono::seconds(10);         // SIGTERM -> SIGKILL
  Duration kill_timeout = std::chrono::seconds(10);  // SIGKILL -> give up
  int first_signal = 15;                             // SIGTERM
  Duration poll_interval = std::chrono::milliseconds(5);
};

struct KillTreeReport {
  bool sent_sigkill = false;  // the grace ran out
  Duration took{};
};

// Sends first_signal to the group, waits up to `grace` for it to empty, SIGKILLs it, and
// waits until no process of the group is left (kill(-pgid, 0) == ESRCH). If `leader` is
// given it is reaped through it (its exit status stays readable); other children of this
// process in the group (see become_child_subreaper) are reaped too. Blocks the caller.
// kTimeout if processes remain after kill_timeout (e.g. stuck in the kernel, or zombies of
// an init that does not reap: call become_child_subreaper() at start-up to avoid that).
Result<KillTreeReport> kill_tree_and_wait(pid_t pgid, const KillTreeOptions& options = {},
                                          ChildProcess* leader = nullptr);
// Same on the loop: polls with a timer instead of blocking; `done` runs on the loop thread.
// `leader`, if given, must outlive the operation.
void async_kill_tree(EventLoop& loop, pid_t pgid, const KillTreeOptions& options,
                     ChildProcess* leader, std::function<void(Result<KillTreeReport>)> done);

// Makes this process the reaper of its orphaned descendants (PR_SET_CHILD_SUBREAPER), so a
// grandchild whose parent died is re-parented here and kill_tree_and_wait() can reap it
// instead of leaving it to an init that may never do so.
Status become_child_subreaper();

}  // namespace shardguard::io
