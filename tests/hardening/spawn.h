// Runs a command as a child process with a bounded wait and reports what it cost: exit
// code, output, wall time and the child's peak resident memory (wait4's rusage), optionally
// under another uid/gid or umask, with a hook that runs in the parent once the child's pid
// is known and before it execs (to plant a file named after that pid).
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/temp_dir.h"

namespace shardguard::testing {

struct SpawnOptions {
  std::optional<uid_t> uid;  // setuid (and setgid to `gid`) before exec
  std::optional<gid_t> gid;
  std::optional<mode_t> umask;
  // Runs in the parent after fork, before the child may exec.
  std::function<void(pid_t)> before_exec;
  std::chrono::milliseconds timeout{60'000};
};

struct SpawnResult {
  int exit_code = -1;  // 128 + signal when killed; -1 when it ran past the timeout
  std::string out, err;
  double seconds = 0;      // wall time
  double cpu_seconds = 0;  // user + system
  long max_rss_kib = 0;
};

inline SpawnResult spawn(const std::vector<std::string>& argv, const SpawnOptions& o = {}) {
  TempDir tmp;
  const std::string out = tmp / "out", err = tmp / "err";
  int go[2];
  if (::pipe2(go, O_CLOEXEC) != 0) return {};
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    char c;
    ::close(go[1]);
    if (::read(go[0], &c, 1) != 1) ::_exit(120);
    const int fo = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int fe = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fo < 0 || fe < 0 || ::dup2(fo, 1) < 0 || ::dup2(fe, 2) < 0) ::_exit(121);
    if (o.umask) ::umask(*o.umask);
    if (o.gid && (::setgroups(0, nullptr) != 0 || ::setgid(*o.gid) != 0)) ::_exit(122);
    if (o.uid && ::setuid(*o.uid) != 0) ::_exit(123);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(go[0]);
  if (o.before_exec) o.before_exec(pid);
  (void)!::write(go[1], "x", 1);
  ::close(go[1]);
  SpawnResult r;
  const auto until = start + o.timeout;
  int status = 0;
  rusage ru{};
  for (;;) {
    const pid_t done = ::wait4(pid, &status, WNOHANG, &ru);
    if (done == pid) break;
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::wait4(pid, &status, 0, &ru);
      r.exit_code = -1;
      r.out = slurp(out);
      r.err = slurp(err) + "\n(killed: ran past the timeout)";
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.max_rss_kib = ru.ru_maxrss;
  r.cpu_seconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                  static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

}  // namespace shardguard::testing
