// Process seam: launching the wrapped training command and tearing down its whole tree.
// Every child starts in its own process group (its pid is the pgid), so signalling the
// group reaches grandchildren too (torchrun workers, data loader processes). Teardown
// reaches further than the group: every descendant found through /proc (a `setsid` one, an
// orphan re-parented to this subreaper), the child's PID namespace where it has one, its
// cgroup where it was given one (io/process_tree.h, io/process_isolation.h). The
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
class ProcessTree;

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

// How far a launched child is kept apart, so that its whole tree can be killed for sure.
enum class Isolation {
  // Its own process group. Teardown finds what leaves the group through /proc; a
  // descendant that leaves the group and outlives a SIGKILLed supervisor is left to
  // record_launched()/sweep_recorded() (io/process_record.h) or a cgroup.
  kNone,
  // Its own PID namespace (and mount namespace, with a fresh /proc, so /proc/<getpid()>
  // means itself): a small init is pid 1 there; it reaps, forwards signals to the child
  // and reports the child's exit status; when the init dies (with the launcher, through
  // PDEATHSIG, or killed) the kernel kills everything in the namespace. Needs root or an
  // unprivileged user namespace (then the child's uid and gid are mapped to themselves);
  // launch() fails with kUnsupported where neither is permitted.
  kPidNamespace,
  // kPidNamespace where the kernel permits it, else kNone (probed at each launch).
  kAuto,
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
  // outlives its supervisor. Note: Linux ties this to the launching thread. With a PID
  // namespace it is set on the namespace's init, so the whole namespace dies.
  bool die_with_parent = false;
  Isolation isolate = Isolation::kNone;
  // A cgroup v2 directory (io/process_isolation.h: Cgroup) the child joins before exec, so
  // all it starts can be listed and killed there. Empty: stays in ours.
  std::string cgroup;
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
  // kNone or kPidNamespace (what kAuto became).
  virtual Isolation isolation() const { return Isolation::kNone; }
  // The child's tree, which outlives its reaping (for teardown and for checking that a
  // peer pid belongs to it); nullptr where the launcher does not track trees.
  virtual std::shared_ptr<ProcessTree> tree() const { return nullptr; }
};

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts the process; returns once it has exec'd. A failure to exec (missing program,
  // bad cwd, unwritable log file) is an error naming argv[0], not an exit status:
  // "launch 'nosuchprog': No such file or directory". See is_transient_launch_error().
  virtual Result<std::unique_ptr<ChildProcess>> launch(const ProcessSpec& spec) = 0;
};

// True for a launch error that may pass by itself: out of file descriptors, processes or
// memory (EMFILE, ENFILE, EAGAIN, ENOMEM; "launch 'python3': pipe: Too many open files").
// Retry such a launch with backoff; any other launch error means the command cannot start.
bool is_transient_launch_error(const Error& error);

// fork/exec launcher. Children get an empty signal mask, default signal dispositions and no
// file descriptors beyond 0-2, and SHARDGUARD_PROCESS_TREE in their environment (a marker
// their descendants inherit, so teardown can tell which tree an orphan came from; with
// EnvMode::kReplace too). Destroying a ChildProcess that has not exited SIGKILLs its
// group (or its namespace) and reaps it, so no zombie is left behind.
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
  size_t processes = 0;      // distinct processes signalled
  size_t outside_group = 0;  // of which not in the process group (setsid, orphans...)
};

// Tears down a whole tree: the process group `pgid` and every process of the launched
// child's ProcessTree (every descendant by PPid, the PID namespace, the cgroup, orphans that
// came from it; see ProcessTree::members()), found again at every step because processes
// fork while they are killed. Sends first_signal (and SIGCONT) to each, waits up to `grace`
// for all to be gone, then stops (SIGSTOP) every one it finds until no new one appears and
// SIGKILLs them all (and the cgroup), and waits until none is left and those re-parented to
// this process are reaped. The tree comes from `leader` if given (it is reaped through it, so
// its exit status stays readable), else from the ChildProcess that launched `pgid` while it
// exists; without either, the group and its descendants. Blocks the caller. kTimeout if
// processes remain after kill_timeout (stuck in the kernel, or zombies of an init that does
// not reap: call become_child_subreaper() at start-up).
Result<KillTreeReport> kill_tree_and_wait(pid_t pgid, const KillTreeOptions& options = {},
                                          ChildProcess* leader = nullptr);
// Same on the loop: polls with a timer instead of blocking; `done` runs on the loop thread.
// `leader`, if given, must outlive the operation.
void async_kill_tree(EventLoop& loop, pid_t pgid, const KillTreeOptions& options,
                     ChildProcess* leader, std::function<void(Result<KillTreeReport>)> done);
// The same for a tree kept after its ChildProcess is gone (ChildProcess::tree()).
Result<KillTreeReport> kill_tree_and_wait(const std::shared_ptr<ProcessTree>& tree,
                                          const KillTreeOptions& options = {});
void async_kill_tree(EventLoop& loop, const std::shared_ptr<ProcessTree>& tree,
                     const KillTreeOptions& options,
                     std::function<void(Result<KillTreeReport>)> done);

// Makes this process the reaper of its orphaned descendants (PR_SET_CHILD_SUBREAPER), so a
// grandchild whose parent died is re-parented here and kill_tree_and_wait() can reap it
// instead of leaving it to an init that may never do so.
Status become_child_subreaper();

// Reaps every dead child of this process that no ChildProcess owns and that is not in this
// process's own group (orphans re-parented to this subreaper), so none lingers as a zombie;
// returns how many. Children this process makes by other means (popen, std::system, a plain
// fork) must stay in its group, as those leave them, or their owner may find them reaped.
// Call it now and then from the loop (teardown reaps those of the tree it kills by itself).
size_t reap_orphans();

}  // namespace shardguard::io
