// fork/exec launcher. Plain POSIX rather than Boost.Process v2: it gives direct control of
// what runs between fork and exec (process group, signal state, append-mode logs, a cgroup,
// an exec error pipe, a PID namespace), and only async-signal-safe calls happen in the child.
#include "io/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <map>

#include "io/detail/child_process.h"
#include "io/detail/exec_plan.h"
#include "io/detail/fd.h"
#include "io/detail/launch_registry.h"
#include "io/process_tree.h"

extern char** environ;

namespace shardguard::io {

using detail::UniqueFd;

namespace {

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

std::vector<std::string> build_environment(const ProcessSpec& spec, const std::string& marker) {
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
  merged[std::string(kTreeMarkerVariable)] = marker;  // ours even if the parent had one
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
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0) {
    return Error::from_errno("launch '" + program + "': open " + which + " '" + path + "'", errno);
  }
  return UniqueFd(fd);
}

// Runs in the forked child: only async-signal-safe calls until exec.
[[noreturn]] void exec_child(int error_fd, const detail::ExecPlan& plan) {
  auto fail = [error_fd](int stage) {
    detail::ChildFailure failure{stage, errno};
    ssize_t ignored = ::write(error_fd, &failure, sizeof failure);
    (void)ignored;
    ::_exit(127);
  };
  // Die with the launcher: a supervisor killed with SIGKILL (the OOM killer) leaves no
  // rank running on behind it. Checked again after, in case the parent is already gone.
  if (plan.die_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != plan.parent) ::_exit(127);
  }
  // Before anything runs, so everything it starts is in the cgroup too.
  if (plan.cgroup_procs_fd >= 0 && ::write(plan.cgroup_procs_fd, "0", 1) != 1) {
    fail(detail::kStageCgroup);
  }
  if (const int stage = detail::prepare_child(plan); stage >= 0) fail(stage);
  ::execve(plan.path, plan.argv, plan.envp);
  fail(detail::kStageExec);
  ::_exit(127);
}

Result<std::unique_ptr<ChildProcess>> fork_and_exec(EventLoop& loop, const detail::ExecPlan& plan,
                                                    const ProcessSpec& spec,
                                                    ProcessTree::Identity identity) {
  const std::string& program = spec.argv[0];
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
    return Error::from_errno("launch '" + program + "': pipe", errno);
  UniqueFd error_read(pipe_fds[0]), error_write(pipe_fds[1]);

  pid_t pid;
  {
    auto registered = detail::lock_launches();
    pid = ::fork();
    if (pid == 0) exec_child(error_write.get(), plan);
    if (pid > 0) detail::register_launched_locked(pid);
  }
  if (pid < 0) return Error::from_errno("launch '" + program + "': fork", errno);
  ::setpgid(pid, pid);  // also here, so the group exists whichever side runs first
  error_write.reset();

  detail::ChildFailure failure{};
  ssize_t n;
  do {
    n = ::read(error_read.get(), &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  if (n > 0) {  // the child failed before exec and has exited: reap it, report why
    int raw = 0;
    while (::waitpid(pid, &raw, 0) < 0 && errno == EINTR) {
    }
    detail::unregister_launched(pid);
    return detail::launch_failure(program, spec.cwd, failure);
  }
  identity.leader = pid;
  identity.leader_start = process_start_time(pid).value_or(0);
  auto tree = std::make_shared<ProcessTree>(std::move(identity));
  detail::register_tree(pid, tree);
  return detail::make_posix_child(loop, pid, program, std::move(tree));
}

Result<std::unique_ptr<ChildProcess>> launch_namespaced(EventLoop& loop,
                                                        const detail::ExecPlan& plan,
                                                        const ProcessSpec& spec,
                                                        ProcessTree::Identity identity,
                                                        bool* refused) {
  const std::string& program = spec.argv[0];
  // Root (CAP_SYS_ADMIN) needs no user namespace; anyone else may, where the kernel allows.
  Result<detail::NamespaceChild> child =
      detail::launch_in_pid_namespace(plan, program, spec.cwd, /*user_namespace=*/false, refused);
  if (!child.ok() && *refused) {
    child =
        detail::launch_in_pid_namespace(plan, program, spec.cwd, /*user_namespace=*/true, refused);
  }
  if (!child.ok()) return std::move(child).error();
  identity.leader = child->pid;
  identity.leader_start = child->start;
  identity.init = child->init;
  identity.init_start = child->init_start;
  auto tree = std::make_shared<ProcessTree>(std::move(identity));
  detail::register_tree(child->pid, tree);
  return detail::make_namespace_child(loop, *child, program, std::move(tree));
}

}  // namespace

namespace detail {

int prepare_child(const ExecPlan& plan) {
  if (::setpgid(0, 0) != 0) return kStageSetpgid;
  sigset_t none;
  sigemptyset(&none);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);  // KILL/STOP: EINVAL
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  const int targets[3] = {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO};
  const int sources[3] = {plan.in_fd, plan.out_fd, plan.err_fd};
  for (int i = 0; i < 3; ++i) {
    if (sources[i] < 0) continue;
    if (sources[i] == targets[i]) {
      ::fcntl(targets[i], F_SETFD, 0);
    } else if (::dup2(sources[i], targets[i]) < 0) {
      return kStageDup2;
    }
  }
  if (plan.cwd != nullptr && ::chdir(plan.cwd) != 0) return kStageChdir;
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);  // best effort: old kernels lack it
  return -1;
}

Error launch_failure(const std::string& program, const std::string& cwd, ChildFailure failure) {
  static constexpr const char* kNames[] = {"setpgid", "dup2",          "chdir",
                                           "exec",    "join cgroup",   "user namespace",
                                           "fork",    "launch channel"};
  std::string what = "launch '" + program + "'";
  if (failure.stage == kStageChdir) {
    what += ": chdir '" + cwd + "'";
  } else if (failure.stage != kStageExec && failure.stage >= 0 && failure.stage <= kStageChannel) {
    what += std::string(": ") + kNames[failure.stage];
  }
  return Error::from_errno(what, failure.err);
}

}  // namespace detail

bool is_transient_launch_error(const Error& error) {
  switch (error.sys_errno()) {
    case EMFILE:
    case ENFILE:
    case EAGAIN:
    case ENOMEM:
    case ENOBUFS:
      return true;
    default:
      return false;
  }
}

Result<std::unique_ptr<ChildProcess>> PosixProcessLauncher::launch(const ProcessSpec& spec) {
  if (spec.argv.empty()) return Error(ErrorCode::kInvalid, "launch: empty argv");
  const std::string& program = spec.argv[0];
  SG_ASSIGN_OR_RETURN(std::string path, resolve_program(program, lookup_path_var(spec)));

  // Everything the child needs is prepared here: after fork it may not allocate.
  ProcessTree::Identity identity;
  identity.marker = detail::next_tree_marker();
  identity.cgroup = spec.cgroup;
  std::vector<std::string> env_strings = build_environment(spec, identity.marker);
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  UniqueFd in_fd, out_fd, err_fd, cgroup_fd;
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
  if (!spec.cgroup.empty()) {
    const std::string procs = spec.cgroup + "/cgroup.procs";
    cgroup_fd = UniqueFd(::open(procs.c_str(), O_WRONLY | O_CLOEXEC));
    if (!cgroup_fd)
      return Error::from_errno("launch '" + program + "': open '" + procs + "'", errno);
  }

  detail::ExecPlan plan;
  plan.path = path.c_str();
  plan.argv = argv.data();
  plan.envp = envp.data();
  plan.cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();
  plan.in_fd = in_fd.get();
  plan.out_fd = out_fd.get();
  plan.err_fd = spec.stderr_path.empty()               ? -1
                : spec.stderr_path == spec.stdout_path ? out_fd.get()
                                                       : err_fd.get();
  plan.cgroup_procs_fd = cgroup_fd.get();
  plan.die_with_parent = spec.die_with_parent;
  plan.parent = spec.die_with_parent ? ::getpid() : 0;

  if (spec.isolate != Isolation::kNone) {
    bool refused = false;
    auto child = launch_namespaced(loop_, plan, spec, identity, &refused);
    if (child.ok() || !refused || spec.isolate == Isolation::kPidNamespace) {
      if (!child.ok() && refused) {
        return Error(ErrorCode::kUnsupported,
                     child.error().message() +
                         " (a PID namespace needs root or unprivileged user namespaces)",
                     child.error().sys_errno());
      }
      return child;
    }
    // kAuto where the kernel says no: a plain process group, torn down through /proc.
  }
  return fork_and_exec(loop_, plan, spec, std::move(identity));
}

}  // namespace shardguard::io
