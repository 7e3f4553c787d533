#include "supervisor/hang_report.h"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace shardguard::supervisor {
namespace {

std::string read_proc(pid_t pid, const char* what) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + what);
  if (!in) return "(unavailable)";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  for (auto& c : s)
    if (c == '\0') c = ' ';
  return s.empty() ? "(empty)" : s;
}

std::vector<pid_t> group_members(pid_t pgid) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (auto* e = ::readdir(d)) {
    pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid > 0 && ::getpgid(pid) == pgid) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

std::string status_line(const std::string& status, const char* key) {
  std::istringstream in(status);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return line;
  return "";
}

std::string gdb_stack(pid_t pid, Duration timeout) {
  if (::access("/usr/bin/gdb", X_OK) != 0) return "(gdb not installed)";
  std::error_code ec;
  std::string tmpl = (std::filesystem::temp_directory_path(ec) / "sg-gdb-XXXXXX").string();
  int fd = ::mkstemp(tmpl.data());
  if (fd < 0) return "(no temp file)";
  pid_t child = ::fork();
  if (child == 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::string p = std::to_string(pid);
    ::execl("/usr/bin/gdb", "gdb", "-p", p.c_str(), "-batch", "-nx", "-ex",
            "thread apply all bt", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fd);
  const auto until = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::ifstream in(tmpl);
  std::stringstream ss;
  ss << in.rdbuf();
  ::unlink(tmpl.c_str());
  return ss.str();
}

}  // namespace

std::string collect_hang_report(pid_t pid, pid_t pgid, Duration gdb_timeout) {
  std::ostringstream out;
  for (pid_t p : group_members(pgid)) {
    const std::string status = read_proc(p, "status");
    out << "== pid " << p << (p == pid ? " (rank)" : "") << ": " << read_proc(p, "cmdline")
        << "\n"
        << status_line(status, "State:") << "\n"
        << "wchan: " << read_proc(p, "wchan") << "\n"
        << "kernel stack:\n"
        << read_proc(p, "stack") << "\n";
  }
  out << "== native stack of pid " << pid << " (gdb)\n" << gdb_stack(pid, gdb_timeout) << "\n";
  return out.str();
}

}  // namespace shardguard::supervisor
