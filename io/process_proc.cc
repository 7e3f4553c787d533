// Reading /proc for process trees (io/process_tree.h) and the launch registry
// (io/detail/launch_registry.h).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "io/detail/fd.h"
#include "io/detail/launch_registry.h"
#include "io/process_tree.h"

namespace shardguard::io {

namespace {

// Reads a small /proc file whole; false if it cannot be opened.
bool read_small(const std::string& path, std::string& out, size_t limit) {
  detail::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  out.clear();
  char buf[4096];
  while (out.size() < limit) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return true;
}

std::optional<ProcInfo> read_stat(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  detail::UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  char buf[1024];
  ssize_t n;
  do {
    n = ::read(fd.get(), buf, sizeof buf - 1);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return std::nullopt;
  return parse_proc_stat(pid, std::string_view(buf, static_cast<size_t>(n)));
}

const std::vector<pid_t> kNoChildren;

}  // namespace

// "pid (comm) state ppid pgrp session ... starttime ...": the fields start after the last
// ')', since comm may hold both spaces and parentheses.
std::optional<ProcInfo> parse_proc_stat(pid_t pid, std::string_view s) {
  const size_t close = s.rfind(')');
  if (close == std::string_view::npos || close + 2 >= s.size()) return std::nullopt;
  ProcInfo info;
  info.pid = pid;
  info.state = s[close + 2];
  size_t pos = close + 3;
  uint64_t fields[19] = {};  // fields 4..22
  for (uint64_t& field : fields) {
    while (pos < s.size() && s[pos] == ' ') ++pos;
    if (pos < s.size() && s[pos] == '-') ++pos;  // tty_nr and such may be negative
    const size_t begin = pos;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') field = field * 10 + (s[pos++] - '0');
    if (pos == begin) return std::nullopt;
  }
  info.ppid = static_cast<pid_t>(fields[0]);
  info.pgid = static_cast<pid_t>(fields[1]);
  info.sid = static_cast<pid_t>(fields[2]);
  info.start_time = fields[18];
  return info;
}

Result<ProcInfo> read_proc_info(pid_t pid) {
  if (auto info = read_stat(pid)) return *info;
  return Error(ErrorCode::kNotFound, "process " + std::to_string(pid) + ": not running");
}

std::optional<uint64_t> process_start_time(pid_t pid) {
  if (auto info = read_stat(pid)) return info->start_time;
  return std::nullopt;
}

ProcessTable ProcessTable::scan() {
  ProcessTable table;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return table;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0') continue;
    if (auto info = read_stat(static_cast<pid_t>(pid))) {
      table.children_[info->ppid].push_back(info->pid);
      table.procs_.emplace(info->pid, *info);
    }
  }
  ::closedir(dir);
  return table;
}

const ProcInfo* ProcessTable::find(pid_t pid) const {
  auto it = procs_.find(pid);
  return it == procs_.end() ? nullptr : &it->second;
}

const ProcInfo* ProcessTable::find_same(pid_t pid, uint64_t start_time) const {
  const ProcInfo* info = find(pid);
  return info != nullptr && info->start_time == start_time ? info : nullptr;
}

const std::vector<pid_t>& ProcessTable::children_of(pid_t pid) const {
  auto it = children_.find(pid);
  return it == children_.end() ? kNoChildren : it->second;
}

std::vector<pid_t> ProcessTable::closure(const std::vector<pid_t>& roots) const {
  std::vector<pid_t> out;
  std::set<pid_t> visited;
  std::deque<pid_t> queue;
  for (pid_t r : roots)
    if (find(r) != nullptr && visited.insert(r).second) queue.push_back(r);
  while (!queue.empty()) {
    const pid_t p = queue.front();
    queue.pop_front();
    out.push_back(p);
    for (pid_t c : children_of(p))
      if (visited.insert(c).second) queue.push_back(c);
  }
  return out;
}

std::vector<pid_t> pids_of_tree(pid_t root) {
  if (root <= 0) return {};
  return ProcessTable::scan().closure({root});
}

bool is_descendant_of(pid_t pid, pid_t ancestor) {
  if (pid <= 0 || ancestor <= 0 || pid == ancestor) return false;
  // A chain of parents is short; the bound only guards against a loop in a racing read.
  for (int depth = 0; depth < 4096; ++depth) {
    auto info = read_stat(pid);
    if (!info || info->ppid <= 0) return false;
    if (info->ppid == ancestor) return true;
    pid = info->ppid;
  }
  return false;
}

namespace {

// Calls `fn` on each NAME=VALUE entry of the process's initial environment until it
// returns true; false if none did (or the file cannot be read).
template <typename F>
bool any_environ_entry(pid_t pid, F fn) {
  std::string env;
  if (!read_small("/proc/" + std::to_string(pid) + "/environ", env, 4 << 20)) return false;
  size_t begin = 0;
  while (begin < env.size()) {
    size_t end = env.find('\0', begin);
    if (end == std::string::npos) end = env.size();
    if (fn(std::string_view(env).substr(begin, end - begin))) return true;
    begin = end + 1;
  }
  return false;
}

}  // namespace

bool environ_has(pid_t pid, std::string_view entry) {
  return any_environ_entry(pid, [&](std::string_view e) { return e == entry; });
}

std::optional<std::string> environ_value(pid_t pid, std::string_view name) {
  std::optional<std::string> out;
  any_environ_entry(pid, [&](std::string_view e) {
    if (e.size() <= name.size() || e.substr(0, name.size()) != name || e[name.size()] != '=')
      return false;
    out = std::string(e.substr(name.size() + 1));
    return true;
  });
  return out;
}

std::vector<pid_t> ProcessTree::members(const ProcessTable& table) {
  std::vector<pid_t> roots;
  if (id_.leader > 0 && table.find_same(id_.leader, id_.leader_start)) roots.push_back(id_.leader);
  if (id_.init > 0 && table.find_same(id_.init, id_.init_start)) roots.push_back(id_.init);
  if (!id_.cgroup.empty()) {
    std::string procs;
    if (read_small(id_.cgroup + "/cgroup.procs", procs, 1 << 20)) {
      for (const char* p = procs.c_str(); *p != '\0';) {
        char* end = nullptr;
        const long pid = std::strtol(p, &end, 10);
        if (end == p) break;
        if (pid > 0) roots.push_back(static_cast<pid_t>(pid));
        p = end;
      }
    }
  }
  {
    std::lock_guard lock(mu_);
    for (const auto& [pid, start] : seen_)
      if (table.find_same(pid, start)) roots.push_back(pid);
  }
  if (!id_.marker.empty()) {
    // Orphans re-parented to this subreaper before anyone saw them (a double fork).
    const std::string entry = std::string(kTreeMarkerVariable) + "=" + id_.marker;
    for (pid_t child : table.children_of(::getpid())) {
      if (!detail::is_launched(child) && environ_has(child, entry)) roots.push_back(child);
    }
  }
  std::vector<pid_t> out = table.closure(roots);
  const pid_t self = ::getpid();
  std::erase_if(out, [self](pid_t p) { return p == self || p <= 1; });
  std::lock_guard lock(mu_);
  seen_.clear();  // the dead are useless: their pid and start time never match again
  for (pid_t p : out) seen_.emplace(p, table.find(p)->start_time);
  return out;
}

bool ProcessTree::contains(pid_t pid) {
  if (pid <= 1 || pid == ::getpid()) return false;
  // The common case in a few reads: the leader, or below it or its init, while they are
  // still the processes launched (the start time rules out a reused pid).
  for (auto [root, start] : {std::pair(id_.leader, id_.leader_start),
                             std::pair(id_.init, id_.init_start)}) {
    if (root <= 0 || process_start_time(root) != start) continue;
    if (pid == root || is_descendant_of(pid, root)) return true;
  }
  const auto members_now = members();  // orphans, the cgroup: a full scan
  return std::find(members_now.begin(), members_now.end(), pid) != members_now.end();
}

namespace detail {
namespace {

struct Registry {
  std::mutex mu;
  std::set<pid_t> launched;
  std::map<pid_t, std::weak_ptr<ProcessTree>> trees;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: children may be reaped at exit
  return *r;
}

std::atomic<uint64_t> marker_counter{0};

}  // namespace

std::unique_lock<std::mutex> lock_launches() { return std::unique_lock(registry().mu); }

void register_launched_locked(pid_t pid) { registry().launched.insert(pid); }

void unregister_launched(pid_t pid) {
  std::lock_guard lock(registry().mu);
  registry().launched.erase(pid);
}

bool is_launched(pid_t pid) {
  std::lock_guard lock(registry().mu);
  return registry().launched.count(pid) != 0;
}

void register_tree(pid_t pgid, const std::shared_ptr<ProcessTree>& tree) {
  std::lock_guard lock(registry().mu);
  auto& trees = registry().trees;
  for (auto it = trees.begin(); it != trees.end();) {  // forget the trees nobody holds
    it = it->second.expired() ? trees.erase(it) : std::next(it);
  }
  trees[pgid] = tree;
}

std::shared_ptr<ProcessTree> find_tree(pid_t pgid) {
  std::lock_guard lock(registry().mu);
  auto it = registry().trees.find(pgid);
  return it == registry().trees.end() ? nullptr : it->second.lock();
}

std::string tree_marker_prefix() {
  static const std::string prefix = std::to_string(::getpid()) + "." +
                                    std::to_string(process_start_time(::getpid()).value_or(0)) +
                                    ".";
  return prefix;
}

std::string next_tree_marker() { return tree_marker_prefix() + std::to_string(++marker_counter); }

bool signal_same_process(pid_t pid, uint64_t start_time, int sig) {
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_send_signal)
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    // The pidfd pins this process: if it is the one that started at start_time, the
    // signal reaches it and no later owner of the pid.
    UniqueFd owner(pidfd);
    if (process_start_time(pid) != start_time) return false;
    return ::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0) == 0;
  }
  if (errno == ESRCH) return false;
#endif
  if (process_start_time(pid) != start_time) return false;
  return ::kill(pid, sig) == 0;
}

}  // namespace detail

}  // namespace shardguard::io
