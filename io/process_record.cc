// Recording launched processes and sweeping their leftovers (io/process_record.h).
#include "io/process_record.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "core/open_regular.h"
#include "core/units.h"
#include "io/detail/fd.h"
#include "io/detail/launch_registry.h"
#include "io/process_tree.h"

namespace shardguard::io {

namespace {

Status append(const std::string& path, const std::string& text) {
  // Never a FIFO or a link a neighbour put at the name (a FIFO would hang `run` at start).
  SG_ASSIGN_OR_RETURN(
      const int raw, open_regular(path, O_WRONLY | O_CREAT | O_APPEND, 0600, "the process record"));
  detail::UniqueFd fd(raw);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::from_errno("record processes in '" + path + "'", errno);
    done += static_cast<size_t>(n);
  }
  return ok_status();
}

struct Record {
  std::vector<RecordedProcess> processes;
  std::set<std::string> launchers;  // marker prefixes
};

Result<Record> read_record(const std::string& path) {
  Record out;
  auto opened = open_regular(path, O_RDONLY, 0, "the process record");
  if (!opened.ok()) {
    if (opened.error().code() == ErrorCode::kNotFound) return out;
    return std::move(opened).error();
  }
  detail::UniqueFd fd(*opened);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd.get(), buf, sizeof buf)) > 0 && text.size() < (16 << 20))
    text.append(buf, static_cast<size_t>(n));
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "launcher") {
      std::string prefix;
      // A prefix is "<pid>.<start>.": anything shorter would match too much.
      if (in >> prefix && prefix.size() >= 4 && prefix.back() == '.') out.launchers.insert(prefix);
    } else if (kind == "process") {
      RecordedProcess p;
      if (in >> p.pid >> p.start_time && p.pid > 1) out.processes.push_back(p);
    }  // anything else (a torn last line) is skipped
  }
  return out;
}

// The owner of a running process (the effective uid it runs as); nullopt once it is gone.
std::optional<uid_t> owner_of(pid_t pid) {
  struct stat st {};
  if (::stat(("/proc/" + std::to_string(pid)).c_str(), &st) != 0) return std::nullopt;
  return st.st_uid;
}

// The recorded launchers whose run is over: a prefix is "<pid>.<start>." of the supervisor
// that launched them, and one still running (with that start time) is a live job, whatever
// the record says: its processes are never leftovers.
std::set<std::string> finished_launchers(const ProcessTable& table, const Record& record) {
  std::set<std::string> out;
  for (const std::string& prefix : record.launchers) {
    unsigned long long pid = 0, start = 0;
    char dot = 0;
    std::istringstream in(prefix);
    if (!(in >> pid >> dot) || dot != '.' || !(in >> start >> dot) || dot != '.') continue;
    if (pid == 0 || pid > static_cast<unsigned long long>(std::numeric_limits<pid_t>::max()))
      continue;
    if (!table.find_same(static_cast<pid_t>(pid), start)) out.insert(prefix);
  }
  return out;
}

// A process the sweep may kill: it runs as this user and carries the marker of a recorded
// launcher whose run is over. Whoever can write the record (pids and start times are public)
// cannot point the sweep at anything else: another user's process, a process no run of
// shardguard launched, or a live job's rank.
bool leftover(pid_t pid, const std::set<std::string>& finished) {
  if (owner_of(pid) != ::geteuid()) return false;
  auto marker = environ_value(pid, kTreeMarkerVariable);
  if (!marker) return false;
  for (const auto& prefix : finished)
    if (marker->rfind(prefix, 0) == 0) return true;
  return false;
}

// The processes to kill now: recorded ones still the same, marked ones, and all below, each
// a leftover of a finished run.
std::vector<pid_t> targets(const ProcessTable& table, const Record& record, SweepReport* report) {
  const std::set<std::string> finished = finished_launchers(table, record);
  std::vector<pid_t> roots;
  for (const auto& p : record.processes) {
    if (!table.find_same(p.pid, p.start_time)) {
      if (report != nullptr) (table.find(p.pid) != nullptr ? report->reused : report->gone)++;
    } else if (leftover(p.pid, finished)) {
      roots.push_back(p.pid);
    } else if (report != nullptr) {
      report->refused++;
    }
  }
  if (!finished.empty()) {
    for (const auto& [pid, info] : table.all()) {
      if (info.state == 'Z') continue;
      if (leftover(pid, finished)) roots.push_back(pid);
    }
  }
  std::vector<pid_t> out = table.closure(roots);
  // Never this process, nor anything it launched, nor a process that is already dead, nor
  // (below a leftover) one that runs as another user.
  const pid_t self = ::getpid();
  const uid_t uid = ::geteuid();
  std::erase_if(out, [&](pid_t p) {
    return p <= 1 || p == self || detail::is_launched(p) || table.find(p)->state == 'Z' ||
           owner_of(p) != uid;
  });
  return out;
}

}  // namespace

Status record_launched(const std::string& path, const ChildProcess& child) {
  std::string text = "launcher " + detail::tree_marker_prefix() + "\n";
  if (auto tree = child.tree()) {
    const auto& id = tree->identity();
    text += "process " + std::to_string(id.leader) + " " + std::to_string(id.leader_start) + "\n";
    if (id.init > 0)
      text += "process " + std::to_string(id.init) + " " + std::to_string(id.init_start) + "\n";
  } else if (auto start = process_start_time(child.pid())) {
    text += "process " + std::to_string(child.pid()) + " " + std::to_string(*start) + "\n";
  }
  return append(path, text);
}

Status record_processes(const std::string& path, const std::vector<RecordedProcess>& processes) {
  std::string text;
  for (const auto& p : processes)
    text += "process " + std::to_string(p.pid) + " " + std::to_string(p.start_time) + "\n";
  return append(path, text);
}

Result<SweepReport> sweep_recorded(const std::string& path, Duration timeout) {
  SG_ASSIGN_OR_RETURN(Record record, read_record(path));
  SweepReport report;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::set<std::pair<pid_t, uint64_t>> killed;
  auto table = ProcessTable::scan();
  std::vector<pid_t> now = targets(table, record, &report);
  auto delay = std::chrono::milliseconds(1);
  while (!now.empty()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return Error(ErrorCode::kTimeout, "sweep of '" + path + "': " + std::to_string(now.size()) +
                                            " process(es) still running after " +
                                            format_duration(timeout));
    }
    // Stop them all first (a stopped process cannot fork), looking until none is new.
    std::set<std::pair<pid_t, uint64_t>> stopped;
    for (int round = 0; round < 16; ++round) {
      bool fresh = false;
      for (pid_t p : now) {
        const uint64_t start = table.find(p)->start_time;
        if (stopped.emplace(p, start).second) {
          fresh = true;
          (void)detail::signal_same_process(p, start, SIGSTOP);
        }
      }
      if (!fresh) break;
      table = ProcessTable::scan();
      now = targets(table, record, nullptr);
    }
    for (pid_t p : now) {
      const uint64_t start = table.find(p)->start_time;
      if (detail::signal_same_process(p, start, SIGKILL)) killed.emplace(p, start);
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(50));
    (void)reap_orphans();  // those re-parented to us
    table = ProcessTable::scan();
    now = targets(table, record, nullptr);
  }
  report.killed = killed.size();
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return Error::from_errno("remove process record '" + path + "'", errno);
  return report;
}

}  // namespace shardguard::io
