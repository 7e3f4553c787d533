#include "cli/run_dir_timeline.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <fstream>

#include "agent/agent_channel.h"
#include "checkpoint/manifest.h"
#include "core/clock.h"
#include "core/filesystem.h"
#include "io/unix_socket_server.h"
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
  std::ifstream in(out.events_path, std::ios::binary);
  if (!in) return Error::from_errno("open '" + out.events_path + "'", errno);
  std::string line;
  while (std::getline(in, line)) {
    // A line still being written has no '\n' yet: leave it to the follower.
    if (in.eof()) break;
    out.bytes_read += line.size() + 1;
    out.timeline.add_line(line);
  }
  if (in.bad()) return Error::from_errno("read '" + out.events_path + "'", errno);
  out.supervisor_alive = supervisor_listening(run_dir);
  const int64_t wall = to_unix_ms(RealClock::instance().wall_now());
  out.now_unix_ms = out.supervisor_alive ? wall : out.timeline.last_unix_ms().value_or(wall);
  return out;
}

std::optional<uint64_t> manifest_bytes(const std::string& manifest_path) {
  std::ifstream in(manifest_path, std::ios::binary);
  if (!in || manifest_path.empty()) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto m = checkpoint::parse_manifest(text, manifest_path);
  if (!m.ok()) return std::nullopt;
  return m->total_bytes();
}

Result<std::vector<std::string>> EventsTail::poll(uint64_t max_bytes) {
  restarted_ = false;
  std::vector<std::string> lines;
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    if (errno == ENOENT) return lines;  // not there yet
    return Error::from_errno("stat '" + path_ + "'", errno);
  }
  if (uint64_t(st.st_size) < offset_) {
    offset_ = 0;
    partial_.clear();
    restarted_ = true;
  }
  if (uint64_t(st.st_size) == offset_) return lines;
  std::FILE* f = std::fopen(path_.c_str(), "rb");
  if (f == nullptr) return Error::from_errno("open '" + path_ + "'", errno);
  std::string data(std::min<uint64_t>(max_bytes, uint64_t(st.st_size) - offset_), '\0');
  size_t got = 0;
  if (::fseeko(f, static_cast<off_t>(offset_), SEEK_SET) == 0)
    got = std::fread(data.data(), 1, data.size(), f);
  const int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
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
