#include "tests/support/proc_tools.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace shardguard::testing {
namespace {

using Clock = std::chrono::steady_clock;

// argv and envp as the C arrays execve wants, built before fork (no allocation after it).
struct ExecArgs {
  std::string path;
  std::vector<std::string> argv_store, env_store;
  std::vector<char*> argv, envp;

  static Result<ExecArgs> make(const std::vector<std::string>& argv,
                               const std::vector<std::string>& env_extra) {
    if (argv.empty()) return Error(ErrorCode::kInvalid, "empty command line");
    auto path = find_program(argv[0]);
    if (!path) return Error(ErrorCode::kNotFound, "'" + argv[0] + "': not found in PATH");
    ExecArgs a;
    a.path = *path;
    a.argv_store = argv;
    std::vector<std::string> set, drop_prefixes;
    for (const auto& x : env_extra) {
      if (x.find('=') != std::string::npos) {
        set.push_back(x);
      } else if (!x.empty() && x.back() == '*') {
        drop_prefixes.push_back(x.substr(0, x.size() - 1));
      }
    }
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry(*e);
      const std::string key = entry.substr(0, entry.find('=') + 1);
      const bool overridden = std::any_of(set.begin(), set.end(), [&](const auto& x) {
        return x.compare(0, key.size(), key) == 0;
      });
      const bool dropped = std::any_of(drop_prefixes.begin(), drop_prefixes.end(),
                                       [&](const auto& p) { return entry.rfind(p, 0) == 0; });
      if (!overridden && !dropped) a.env_store.push_back(std::move(entry));
    }
    a.env_store.insert(a.env_store.end(), set.begin(), set.end());
    for (auto& s : a.argv_store) a.argv.push_back(s.data());
    a.argv.push_back(nullptr);
    for (auto& s : a.env_store) a.envp.push_back(s.data());
    a.envp.push_back(nullptr);
    return a;
  }
};

// In the child: new process group, optional death signal, then exec. Never returns.
[[noreturn]] void exec_child(const ExecArgs& a, pid_t parent, int death_signal) {
  ::setpgid(0, 0);
  if (death_signal != 0) {
    ::prctl(PR_SET_PDEATHSIG, death_signal);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
  }
  ::close_range(3, ~0U, 0);
  ::execve(a.path.c_str(), a.argv.data(), a.envp.data());
  ::_exit(127);
}

int decode_status(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::optional<std::string> find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) == 0) return name;
    return std::nullopt;
  }
  const char* env_path = std::getenv("PATH");
  std::string dirs = std::string(env_path ? env_path : "/usr/bin:/bin") + ":/usr/sbin:/sbin";
  std::stringstream ss(dirs);
  for (std::string dir; std::getline(ss, dir, ':');) {
    if (dir.empty()) continue;
    std::string candidate = dir + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  return std::nullopt;
}

Result<ProcResult> run_process(const std::vector<std::string>& argv,
                               const std::vector<std::string>& env_extra,
                               std::chrono::milliseconds timeout) {
  auto args = ExecArgs::make(argv, env_extra);
  if (!args.ok()) return args.error();
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return Error::from_errno("pipe", errno);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return Error::from_errno("pipe", errno);
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Error::from_errno("fork '" + argv[0] + "'", errno);
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    exec_child(*args, parent, SIGKILL);
  }
  ::setpgid(pid, pid);  // also in the parent, so the kill below cannot miss the group
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);

  ProcResult r;
  const auto deadline = Clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      r.timed_out = true;
      break;
    }
    int n = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left, 100)));
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        sinks[i]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  // A daemonizing child may keep the pipes open after it exits: the deadline still holds,
  // and the group is killed only when the command itself is still running.
  int st = 0;
  if (r.timed_out) {
    if (::waitpid(pid, &st, WNOHANG) == pid) {
      r.timed_out = false;
      r.exit_code = decode_status(st);
    } else {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      r.exit_code = decode_status(st);
    }
  } else {
    // Pipes closed: the command has exited or is about to; bound the wait all the same.
    while (::waitpid(pid, &st, WNOHANG) == 0) {
      if (Clock::now() >= deadline) {
        r.timed_out = true;
        ::kill(-pid, SIGKILL);
        ::waitpid(pid, &st, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    r.exit_code = decode_status(st);
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  return r;
}

Result<pid_t> spawn_process(const std::vector<std::string>& argv,
                            const std::vector<std::string>& env_extra, const std::string& log_path,
                            int death_signal) {
  auto args = ExecArgs::make(argv, env_extra);
  if (!args.ok()) return args.error();
  int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return Error::from_errno("open '" + log_path + "'", errno);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log);
    return Error::from_errno("fork '" + argv[0] + "'", errno);
  }
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::dup2(log, 1);
    ::dup2(log, 2);
    exec_child(*args, parent, death_signal);
  }
  ::setpgid(pid, pid);
  ::close(log);
  return pid;
}

bool process_alive(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close_paren = stat.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= stat.size()) return false;
  const char state = stat[close_paren + 2];
  return state != 'Z' && state != 'X';
}

bool wait_exit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    int st = 0;
    pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno == ECHILD && !process_alive(pid)) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::optional<int> wait_child(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    int st = 0;
    pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) return decode_status(st);
    if (r < 0) return std::nullopt;
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool stop_process(pid_t pid, std::chrono::milliseconds grace) {
  if (pid <= 0) return true;
  ::kill(pid, SIGTERM);
  if (wait_exit(pid, grace)) return true;
  ::kill(pid, SIGKILL);
  return wait_exit(pid, std::chrono::seconds(5));
}

std::string process_comm(pid_t pid) {
  std::string comm = read_file("/proc/" + std::to_string(pid) + "/comm");
  while (!comm.empty() && comm.back() == '\n') comm.pop_back();
  return comm;
}

std::optional<uint64_t> process_start_time(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close_paren = stat.rfind(')');
  if (close_paren == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(close_paren + 2));
  std::string field;
  // Fields after the command name start at field 3 (state); start time is field 22.
  for (int i = 3; i <= 22; ++i)
    if (!(rest >> field)) return std::nullopt;
  return std::strtoull(field.c_str(), nullptr, 10);
}

std::vector<std::string> process_environ(pid_t pid) {
  const std::string raw = read_file("/proc/" + std::to_string(pid) + "/environ");
  std::vector<std::string> env;
  size_t start = 0;
  while (start < raw.size()) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    if (end > start) env.push_back(raw.substr(start, end - start));
    start = end + 1;
  }
  return env;
}

std::vector<pid_t> pids_where(
    const std::function<bool(pid_t, const std::vector<std::string>& env)>& pred) {
  std::vector<pid_t> found;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  const pid_t self = ::getpid();
  while (dirent* d = ::readdir(proc)) {
    char* end = nullptr;
    const long n = std::strtol(d->d_name, &end, 10);
    const auto pid = static_cast<pid_t>(n);
    if (end == d->d_name || *end != '\0' || pid == self) continue;
    const auto env = process_environ(pid);
    if (!env.empty() && pred(pid, env) && process_alive(pid)) found.push_back(pid);
  }
  ::closedir(proc);
  return found;
}

std::vector<pid_t> pids_with_env(const std::vector<std::string>& entries) {
  return pids_where([&](pid_t, const std::vector<std::string>& env) {
    return std::all_of(entries.begin(), entries.end(), [&](const std::string& want) {
      return std::find(env.begin(), env.end(), want) != env.end();
    });
  });
}

std::vector<pid_t> pids_with_open_file(const std::string& path) {
  std::vector<pid_t> found;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  const pid_t self = ::getpid();
  while (dirent* d = ::readdir(proc)) {
    char* end = nullptr;
    const auto pid = static_cast<pid_t>(std::strtol(d->d_name, &end, 10));
    if (end == d->d_name || *end != '\0' || pid == self) continue;
    const std::string fd_dir = std::string("/proc/") + d->d_name + "/fd";
    DIR* fds = ::opendir(fd_dir.c_str());
    if (fds == nullptr) continue;
    bool holds = false;
    while (dirent* f = ::readdir(fds)) {
      if (f->d_name[0] == '.') continue;
      char target[4096];
      const ssize_t n = ::readlink((fd_dir + "/" + f->d_name).c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      const std::string t(target, static_cast<size_t>(n));
      if (t == path || (t.size() > path.size() && t.compare(0, path.size(), path) == 0 &&
                        t[path.size()] == '/')) {
        holds = true;
        break;
      }
    }
    ::closedir(fds);
    if (holds && process_alive(pid)) found.push_back(pid);
  }
  ::closedir(proc);
  return found;
}

std::optional<std::string> env_value(const std::vector<std::string>& env, const std::string& key) {
  const std::string prefix = key + "=";
  for (const auto& e : env)
    if (e.compare(0, prefix.size(), prefix) == 0) return e.substr(prefix.size());
  return std::nullopt;
}

Result<int> free_tcp_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Error::from_errno("socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    ::close(fd);
    return Error::from_errno("bind 127.0.0.1:0", err);
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace shardguard::testing
