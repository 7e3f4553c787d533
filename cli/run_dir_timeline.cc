#include "cli/run_dir_timeline.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string_view>

#include "agent/agent_channel.h"
#include "checkpoint/manifest.h"
#include "core/clock.h"
#include "core/filesystem.h"
#include "core/open_regular.h"
#include "io/unix_socket_server.h"
#include "supervisor/event_log.h"
#include "supervisor/job_config_toml.h"
#include "supervisor/rank_env.h"

namespace shardguard::cli {
namespace {
constexpr size_t kMaxLine = 4 << 20;
}  // namespace

Result<supervisor::RestartBudgets> budgets_from_config(const std::string& path) {
  SG_ASSIGN_OR_RETURN(supervisor::JobConfig c, supervisor::load_job_config(path));
  return budgets_of(c);
}

RunDirTimeline empty_run_dir(const std::string& run_dir) {
  return RunDirTimeline{supervisor::Timeline{}, join_path(run_dir, "events.jsonl")};
}

supervisor::RestartBudgets budgets_of(const supervisor::JobConfig& c) {
  auto b = [](const supervisor::RestartBudget& r) {
    return policies::Budget{r.max_restarts, r.window};
  };
  return supervisor::RestartBudgets{{"crash", b(c.crash)},
                                    {"hang", b(c.hang)},
                                    {"infrastructure", b(c.infrastructure)},
                                    {"preempted", b(c.preempted)},
                                    {"no_space", b(c.no_space)},
                                    {"resume_failed", b(c.resume_failed)}};
}

bool supervisor_listening(const std::string& run_dir) {
  auto client =
      io::UnixSocketClient::connect(agent::agent_socket_path(supervisor::absolute_path(run_dir)));
  return client.ok();
}

Result<RunDirTimeline> load_run_dir(const std::string& run_dir,
                                    const supervisor::RestartBudgets& budgets) {
  RunDirTimeline out{supervisor::Timeline(supervisor::TimelineOptions{budgets, true}),
                     join_path(run_dir, "events.jsonl")};
  // Read as `run` wrote it, never through a link or from a FIFO put in its place.
  SG_ASSIGN_OR_RETURN(
      const std::string text,
      read_regular_file(out.events_path, supervisor::kMaxEventsFileBytes, "the events file"));
  std::string_view rest = text;
  // A line still being written has no '\n' yet: leave it to the follower.
  for (size_t eol; (eol = rest.find('\n')) != std::string_view::npos; rest.remove_prefix(eol + 1)) {
    out.bytes_read += eol + 1;
    out.timeline.add_line(rest.substr(0, eol));
  }
  out.supervisor_alive = supervisor_listening(run_dir);
  const int64_t wall = to_unix_ms(RealClock::instance().wall_now());
  out.now_unix_ms = out.supervisor_alive ? wall : out.timeline.last_unix_ms().value_or(wall);
  return out;
}

std::optional<uint64_t> manifest_bytes(const std::string& manifest_path) {
  if (manifest_path.empty()) return std::nullopt;
  auto text = read_regular_file(manifest_path, size_t{64} << 20, "the manifest");
  if (!text.ok()) return std::nullopt;
  auto m = checkpoint::parse_manifest(*text, manifest_path);
  if (!m.ok()) return std::nullopt;
  return m->total_bytes();
}

Result<std::vector<std::string>> EventsTail::poll(uint64_t max_bytes) {
  restarted_ = false;
  std::vector<std::string> lines;
  struct stat st {};
  if (::lstat(path_.c_str(), &st) != 0) {
    if (errno == ENOENT) return lines;  // not there yet
    return Error::from_errno("stat '" + path_ + "'", errno);
  }
  if (uint64_t(st.st_size) < offset_) {
    offset_ = 0;
    partial_.clear();
    restarted_ = true;
  }
  if (uint64_t(st.st_size) == offset_) return lines;
  // Never through a link, never blocked on a FIFO put at the name (open_regular).
  SG_ASSIGN_OR_RETURN(const int fd, open_regular(path_, O_RDONLY, 0, "the events file"));
  std::string data(std::min<uint64_t>(max_bytes, uint64_t(st.st_size) - offset_), '\0');
  size_t got = 0;
  int err = 0;
  while (got < data.size()) {
    const ssize_t n =
        ::pread(fd, data.data() + got, data.size() - got, static_cast<off_t>(offset_ + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (err != 0) return Error::from_errno("read '" + path_ + "'", err);
  data.resize(got);
  offset_ += got;
  partial_ += data;
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(partial_.substr(start, nl - start));
  partial_.erase(0, start);
  // A "line" this long is no record; dropping it keeps a broken writer from growing us.
  if (partial_.size() > kMaxLine) partial_.clear();
  return lines;
}

}  // namespace shardguard::cli
