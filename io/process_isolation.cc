// Probing PID namespaces and cgroup v2 (io/process_isolation.h), and cgroups per attempt.
#include "io/process_isolation.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>

#include "core/units.h"
#include "io/detail/fd.h"

namespace shardguard::io {

namespace {

// mountinfo writes a space, tab, newline or backslash in a path as \ooo (octal).
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool octal = s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' &&
                       s[i + 2] >= '0' && s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7';
    if (!octal) {
      out += s[i];
      continue;
    }
    out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
    i += 3;
  }
  return out;
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// A small kernel file, read with plain read(): a stream would throw when the file goes away
// mid-read (a cgroup being removed); "" when it cannot be read.
std::string read_text(const std::string& path) {
  detail::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  std::string out;
  if (!fd) return out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) > 0 && out.size() < (1 << 20);)
    out.append(buf, static_cast<size_t>(n));
  return out;
}

bool kernel_at_least(int major, int minor) {
  utsname u{};
  if (::uname(&u) != 0) return false;
  int ma = 0, mi = 0;
  if (std::sscanf(u.release, "%d.%d", &ma, &mi) != 2) return false;
  return ma > major || (ma == major && mi >= minor);
}

// Tries a child in new namespaces; 0 if it ran, else the errno of clone.
int try_namespaces(unsigned long flags) {
  // The child only exits: safe right after clone in a process with threads.
  const long pid = ::syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0);
  if (pid == 0) ::_exit(0);
  if (pid < 0) return errno;
  int status = 0;
  while (::waitpid(static_cast<pid_t>(pid), &status, 0) < 0 && errno == EINTR) {
  }
  return 0;
}

bool populated(const std::string& dir) {
  std::istringstream in(read_text(dir + "/cgroup.events"));
  std::string key;
  int value = 0;
  while (in >> key >> value)
    if (key == "populated") return value != 0;
  return !Cgroup::at(dir).procs().empty();
}

}  // namespace

CgroupSupport parse_cgroup_v2(std::string_view mountinfo, std::string_view self_cgroup) {
  CgroupSupport out;
  // mountinfo: id parent major:minor root mount-point options ... - fstype source super
  std::istringstream mounts{std::string(mountinfo)};
  std::string line, mount_root;
  while (std::getline(mounts, line)) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype;
    tail >> fstype;
    if (fstype != "cgroup2") continue;
    std::istringstream head(line.substr(0, dash));
    std::string id, parent, devno, root, point;
    head >> id >> parent >> devno >> root >> point;
    out.mount = unescape(point);
    mount_root = unescape(root);
    break;
  }
  if (out.mount.empty()) {
    out.why = "no cgroup2 file system is mounted";
    return out;
  }
  std::istringstream cgroups{std::string(self_cgroup)};
  std::string own_path;
  while (std::getline(cgroups, line)) {
    if (line.rfind("0::", 0) == 0) own_path = line.substr(3);
  }
  if (own_path.empty() || own_path[0] != '/') {
    out.why = "this process has no cgroup v2 entry in /proc/self/cgroup";
    return out;
  }
  // The mount shows the hierarchy from mount_root down (a cgroup namespace or bind mount).
  const bool below_root =
      mount_root == "/" || own_path == mount_root || own_path.rfind(mount_root + "/", 0) == 0;
  if (!below_root) {
    out.why = "this process's cgroup '" + own_path + "' is outside the mount '" + out.mount + "'";
    return out;
  }
  std::string rel = mount_root == "/" ? own_path : own_path.substr(mount_root.size());
  if (rel.empty() || rel.front() != '/') rel.insert(rel.begin(), '/');
  if (rel.back() != '/') rel += '/';
  out.own = (out.mount.back() == '/' ? out.mount.substr(0, out.mount.size() - 1) : out.mount) + rel;
  return out;
}

CgroupSupport probe_cgroup_v2() {
  CgroupSupport out =
      parse_cgroup_v2(read_text("/proc/self/mountinfo"), read_text("/proc/self/cgroup"));
  if (out.own.empty()) return out;
  // The root cgroup has no cgroup.kill of its own; its children do from Linux 5.14 on.
  out.has_kill = exists(out.own + "cgroup.kill") || kernel_at_least(5, 14);
  if (::access(out.own.c_str(), W_OK) != 0) {
    out.why = "cannot create cgroups in '" + out.own + "': " + std::strerror(errno);
  } else if (::access((out.own + "cgroup.procs").c_str(), W_OK) != 0) {
    out.why = "cannot move processes in '" + out.own + "': " + std::strerror(errno);
  } else {
    out.writable = true;
  }
  return out;
}

IsolationSupport probe_isolation() {
  IsolationSupport out;
  int err = try_namespaces(CLONE_NEWPID | CLONE_NEWNS);
  if (err == 0) {
    out.pid_namespace = true;
  } else {
    const int user_err = try_namespaces(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS);
    if (user_err == 0) {
      out.pid_namespace = out.via_user_namespace = true;
    } else {
      out.pid_namespace_why = std::string("new PID namespace: ") + std::strerror(err) +
                              "; in a new user namespace: " + std::strerror(user_err);
    }
  }
  out.cgroup = probe_cgroup_v2();
  return out;
}

std::string IsolationSupport::describe() const {
  std::string s = "PID namespaces: ";
  s += !pid_namespace       ? "no (" + pid_namespace_why + ")"
       : via_user_namespace ? std::string("yes (user namespace)")
                            : std::string("yes (root)");
  s += "; cgroup v2: ";
  if (cgroup.writable) {
    s += cgroup.own + " (writable" + std::string(cgroup.has_kill ? ", cgroup.kill)" : ")");
  } else {
    s += "no (" + cgroup.why + ")";
  }
  return s;
}

Result<Cgroup> Cgroup::create(const std::string& parent, const std::string& name) {
  if (name.empty() || name[0] == '.' || name.find('/') != std::string::npos)
    return Error(ErrorCode::kInvalid, "cgroup name '" + name + "': must be a plain name");
  std::string path = parent;
  if (path.empty() || path.back() != '/') path += '/';
  path += name;
  if (::mkdir(path.c_str(), 0755) != 0)
    return Error::from_errno("create cgroup '" + path + "'", errno);
  return Cgroup(std::move(path));
}

std::vector<pid_t> Cgroup::procs() const {
  std::vector<pid_t> out;
  std::istringstream in(read_text(path_ + "/cgroup.procs"));
  pid_t pid;
  while (in >> pid) out.push_back(pid);
  return out;
}

Status Cgroup::kill_and_remove(Duration timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const bool has_kill = exists(path_ + "/cgroup.kill");
  auto delay = std::chrono::milliseconds(1);
  while (true) {
    if (has_kill) {
      detail::UniqueFd fd(::open((path_ + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC));
      if (!fd || ::write(fd.get(), "1", 1) != 1)
        return Error::from_errno("kill cgroup '" + path_ + "'", errno);
    } else {
      for (pid_t pid : procs()) ::kill(pid, SIGKILL);  // a stuck fork bomb: again next round
    }
    if (!populated(path_)) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      return Error(ErrorCode::kTimeout, "cgroup '" + path_ + "' still has " +
                                            std::to_string(procs().size()) + " process(es) " +
                                            format_duration(timeout) + " after SIGKILL");
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(50));
  }
  // Dead processes leave the cgroup as they exit, before they are reaped; removal can
  // still race the kernel's bookkeeping for a moment.
  for (int i = 0; ::rmdir(path_.c_str()) != 0; ++i) {
    if (errno == ENOENT) break;
    if (errno != EBUSY || std::chrono::steady_clock::now() >= deadline)
      return Error::from_errno("remove cgroup '" + path_ + "'", errno);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return ok_status();
}

Result<size_t> sweep_cgroups(const std::string& parent, const std::string& prefix,
                             Duration timeout) {
  if (prefix.empty()) return Error(ErrorCode::kInvalid, "sweep cgroups: empty prefix");
  DIR* dir = ::opendir(parent.c_str());
  if (dir == nullptr) return Error::from_errno("sweep cgroups in '" + parent + "'", errno);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (e->d_type == DT_DIR && name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  ::closedir(dir);
  size_t removed = 0;
  for (const auto& name : names) {
    SG_RETURN_IF_ERROR(Cgroup::at(parent + "/" + name).kill_and_remove(timeout));
    ++removed;
  }
  return removed;
}

}  // namespace shardguard::io
