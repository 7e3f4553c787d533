#include "agent/slurm_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>

extern char** environ;

namespace shardguard::agent {
namespace {

struct Pipe {
  int fd[2] = {-1, -1};
  ~Pipe() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
  void close_end(int i) {
    if (fd[i] >= 0) ::close(fd[i]);
    fd[i] = -1;
  }
};

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// argv[0] as execve needs it: looked up in PATH when it has no '/'.
std::optional<std::string> resolve(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', begin), dirs.size());
    std::string candidate = (end > begin ? dirs.substr(begin, end - begin) : ".") + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  return std::nullopt;
}

}  // namespace

Result<CommandOutput> run_command_blocking(const std::vector<std::string>& argv, Duration timeout) {
  if (argv.empty()) return Error(ErrorCode::kInvalid, "run: no command");
  const std::string& name = argv[0];
  const auto program = resolve(name);
  if (!program) return Error(ErrorCode::kNotFound, "run '" + name + "': not found in PATH");
  Pipe out, err;
  if (::pipe2(out.fd, O_CLOEXEC) != 0 || ::pipe2(err.fd, O_CLOEXEC) != 0)
    return Error::from_errno("run '" + name + "': pipe", errno);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  const pid_t pid = ::fork();
  if (pid < 0) return Error::from_errno("run '" + name + "': fork", errno);
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    struct sigaction dfl {
    }, ign{};
    dfl.sa_handler = SIG_DFL;
    ign.sa_handler = SIG_IGN;
    for (int sig = 1; sig < NSIG; ++sig)
      if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, sig == SIGTERM ? &ign : &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const int in = ::open("/dev/null", O_RDONLY);
    if (in < 0 || ::dup2(in, 0) < 0 || ::dup2(out.fd[1], 1) < 0 || ::dup2(err.fd[1], 2) < 0)
      ::_exit(127);
    ::execve(program->c_str(), args.data(), environ);
    ::_exit(127);
  }
  out.close_end(1);
  err.close_end(1);

  CommandOutput result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  while (out.fd[0] >= 0 || err.fd[0] >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[2] = {{out.fd[0], POLLIN, 0}, {err.fd[0], POLLIN, 0}};
    const int n = ::poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buf[4096];
      const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        (i == 0 ? result.out : result.err).append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        (i == 0 ? out : err).close_end(0);
      }
    }
  }
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return Error(
        ErrorCode::kTimeout,
        "'" + name + "' did not finish within " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()) +
            " ms (killed)");
  result.exit_code = exit_code_of(status);
  return result;
}

}  // namespace shardguard::agent
