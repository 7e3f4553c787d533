// fork/exec launcher. Plain POSIX rather than Boost.Process v2: it gives direct control of
// what runs between fork and exec (process group, signal state, append-mode logs, an exec
// error pipe), and only async-signal-safe calls happen in the child.
#include "io/process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <map>

#include "io/detail/child_process.h"
#include "io/detail/fd.h"

extern char** environ;

namespace shardguard::io {

using detail::UniqueFd;

namespace {

// What the child writes to the CLOEXEC pipe when it fails before exec.
struct ChildFailure {
  int stage;  // index into kStageNames
  int err;
};
constexpr const char* kStageNames[] = {"setpgid", "dup2", "chdir", "exec"};

Result<std::string> resolve_program(const std::string& program, const std::string& path_var) {
  if (program.empty()) return Error(ErrorCode::kInvalid, "launch: empty program name");
  if (program.find('/') != std::string::npos) return program;
  int last_err = ENOENT;
  size_t begin = 0;
  while (begin <= path_var.size()) {
    size_t end = path_var.find(':', begin);
    if (end == std::string::npos) end = path_var.size();
    std::string dir = path_var.substr(begin, end - begin);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
      last_err = EACCES;
    }
    begin = end + 1;
  }
  return Error::from_errno("launch '" + program + "'", last_err);
}

std::vector<std::string> build_environment(const ProcessSpec& spec) {
  std::map<std::string, std::string> merged;
  if (spec.env_mode == ProcessSpec::EnvMode::kAdd) {
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      std::string_view entry(*e);
      const size_t eq = entry.find('=');
      if (eq == std::string_view::npos) continue;
      merged.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
    }
  }
  for (const auto& [key, value] : spec.env) merged[key] = value;
  std::vector<std::string> out;
  out.reserve(merged.size());
  for (const auto& [key, value] : merged) out.push_back(key + "=" + value);
  return out;
}

std::string lookup_path_var(const ProcessSpec& spec) {
  if (auto it = spec.env.find("PATH"); it != spec.env.end()) return it->second;
  if (spec.env_mode == ProcessSpec::EnvMode::kAdd) {
    if (const char* path = std::getenv("PATH")) return path;
  }
  return "/usr/local/bin:/usr/bin:/bin";
}

Result<UniqueFd> open_log(const std::string& program, const char* which, const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Error::from_errno("launch '" + program + "': open " + which + " '" + path + "'", errno);
  }
  return UniqueFd(fd);
}

// Runs in the forked child: only async-signal-safe calls until exec.
[[noreturn]] void exec_child(int error_fd, int in_fd, int out_fd, int err_fd, const char* cwd,
                             const char* path, char* const* argv, char* const* envp,
                             pid_t parent) {
  auto fail = [error_fd](int stage) {
    ChildFailure failure{stage, errno};
    ssize_t ignored = ::write(error_fd, &failure, sizeof failure);
    (void)ignored;
    ::_exit(127);
  };
  if (::setpgid(0, 0) != 0) fail(0);
  // Die with the launcher: a supervisor killed with SIGKILL (the OOM killer) leaves no
  // rank running on behind it. Checked again after, in case the parent is already gone.
  if (parent > 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);  // KILL/STOP: EINVAL
  const int targets[3] = {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO};
  const int sources[3] = {in_fd, out_fd, err_fd};
  for (int i = 0; i < 3; ++i) {
    if (sources[i] < 0) continue;
    if (sources[i] == targets[i]) {
      ::fcntl(targets[i], F_SETFD, 0);
    } else if (::dup2(sources[i], targets[i]) < 0) {
      fail(1);
    }
  }
  if (cwd != nullptr && ::chdir(cwd) != 0) fail(2);
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);  // best effort: old kernels lack it
  ::execve(path, argv, envp);
  fail(3);
  ::_exit(127);
}

}  // namespace

Result<std::unique_ptr<ChildProcess>> PosixProcessLauncher::launch(const ProcessSpec& spec) {
  if (spec.argv.empty()) return Error(ErrorCode::kInvalid, "launch: empty argv");
  const std::string& program = spec.argv[0];
  SG_ASSIGN_OR_RETURN(std::string path, resolve_program(program, lookup_path_var(spec)));

  // Everything the child needs is prepared here: after fork it may not allocate.
  std::vector<std::string> env_strings = build_environment(spec);
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  UniqueFd in_fd, out_fd, err_fd;
  if (spec.stdin_null) {
    in_fd = UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!in_fd) return Error::from_errno("launch '" + program + "': open /dev/null", errno);
  }
  if (!spec.stdout_path.empty()) {
    SG_ASSIGN_OR_RETURN(out_fd, open_log(program, "stdout", spec.stdout_path));
  }
  if (!spec.stderr_path.empty() && spec.stderr_path != spec.stdout_path) {
    SG_ASSIGN_OR_RETURN(err_fd, open_log(program, "stderr", spec.stderr_path));
  }
  const int stderr_source = spec.stderr_path.empty()               ? -1
                            : spec.stderr_path == spec.stdout_path ? out_fd.get()
                                                                   : err_fd.get();
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
    return Error::from_errno("launch '" + program + "': pipe", errno);
  UniqueFd error_read(pipe_fds[0]), error_write(pipe_fds[1]);

  const pid_t parent = spec.die_with_parent ? ::getpid() : 0;
  const pid_t pid = ::fork();
  if (pid < 0) return Error::from_errno("launch '" + program + "': fork", errno);
  if (pid == 0) {
    exec_child(error_write.get(), in_fd.get(), out_fd.get(), stderr_source,
               spec.cwd.empty() ? nullptr : spec.cwd.c_str(), path.c_str(), argv.data(),
               envp.data(), parent);
  }
  ::setpgid(pid, pid);  // also here, so the group exists whichever side runs first
  error_write.reset();

  ChildFailure failure{};
  ssize_t n;
  do {
    n = ::read(error_read.get(), &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  if (n > 0) {  // the child failed before exec and has exited: reap it, report why
    int raw = 0;
    while (::waitpid(pid, &raw, 0) < 0 && errno == EINTR) {
    }
    std::string what = "launch '" + program + "'";
    if (failure.stage == 2) what += ": chdir '" + spec.cwd + "'";
    if (failure.stage != 2 && failure.stage != 3)
      what += std::string(": ") + kStageNames[failure.stage];
    return Error::from_errno(what, failure.err);
  }

  return detail::make_posix_child(loop_, pid, program);
}

}  // namespace shardguard::io