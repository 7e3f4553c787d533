// Processes for the test fixtures that drive real system daemons (tests/support/slurm_cluster.h,
// tests/support/netns.h): run a command to its end within a deadline, start a long-lived
// daemon that dies with the test, find processes by an environment marker, and stop processes
// by pid. Nothing here matches processes by name: other engineers' daemons may run beside ours.
//
// Thread-safety: free functions, callable from any thread. Between fork and exec the child
// only makes async-signal-safe calls. A child started with a death signal gets it when the
// *thread* that started it exits (PR_SET_PDEATHSIG), so start fixtures on the test's thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"

namespace shardguard::testing {

struct ProcResult {
  int exit_code = -1;  // 128 + signal when it died of a signal
  std::string out;
  std::string err;
  bool timed_out = false;  // killed (with its process group) at the deadline
};

// Runs `argv` (argv[0] looked up in PATH) with this process's environment changed by
// `env_extra`: "K=V" sets K (replacing an inherited K), "PREFIX*" drops every inherited
// variable whose name starts with PREFIX. Stdin is /dev/null; it runs in its own process
// group, and its output is returned. At `timeout` the whole group is killed and `timed_out` is set.
// Errors only when the command cannot be started.
Result<ProcResult> run_process(const std::vector<std::string>& argv,
                               const std::vector<std::string>& env_extra,
                               std::chrono::milliseconds timeout);

// Starts `argv` (environment as for run_process) in its own process group with stdout and
// stderr appended to `log_path`;
// `death_signal` (0: none) is delivered to it when the calling thread ends, so a crashed test
// does not leave it running. The caller reaps it with wait_exit().
Result<pid_t> spawn_process(const std::vector<std::string>& argv,
                            const std::vector<std::string>& env_extra, const std::string& log_path,
                            int death_signal);

// True once `pid` is gone (reaped if it is our child; for other processes, absent from /proc
// or a zombie), polling every 10 ms until `timeout`.
bool wait_exit(pid_t pid, std::chrono::milliseconds timeout);

// The exit code of our child `pid` (128 + signal when killed), or nullopt if it is still
// running at `timeout`.
std::optional<int> wait_child(pid_t pid, std::chrono::milliseconds timeout);

// Sends SIGTERM, waits up to `grace`, then SIGKILL and waits up to 5 s. True once it is gone.
bool stop_process(pid_t pid, std::chrono::milliseconds grace);

// Whether `pid` is alive (a zombie counts as gone).
bool process_alive(pid_t pid);

// Field 22 of /proc/PID/stat (start time in clock ticks since boot): with the pid it names
// one process for good, even after the pid is reused.
std::optional<uint64_t> process_start_time(pid_t pid);

// The environment `pid` was started with (/proc/PID/environ); empty when unreadable.
std::vector<std::string> process_environ(pid_t pid);

// Every live pid (not this process) whose start environment holds all of `entries` ("K=V").
std::vector<pid_t> pids_with_env(const std::vector<std::string>& entries);

// Every live pid (not this process) whose readable start environment satisfies `pred`.
std::vector<pid_t> pids_where(
    const std::function<bool(pid_t, const std::vector<std::string>& env)>& pred);

// Every live pid (not this process) with a file descriptor open on `path` or on anything below
// it (`path` a directory). Daemons that rewrite their title (slurmstepd) clobber their
// /proc/PID/environ, but the log files they hold open still name them.
std::vector<pid_t> pids_with_open_file(const std::string& path);

// The value of `key` in an environment list ("K=V"), if present.
std::optional<std::string> env_value(const std::vector<std::string>& env, const std::string& key);

// A TCP port on 127.0.0.1 that the kernel handed out a moment ago (free, not reserved).
Result<int> free_tcp_port();

// The command name of `pid` (/proc/PID/comm), empty when it is gone.
std::string process_comm(pid_t pid);

// The full path of `name` in PATH (and /usr/sbin, /sbin, where daemons live), if any.
std::optional<std::string> find_program(const std::string& name);

}  // namespace shardguard::testing
