// A run dir's timeline for `shardguard status` and `shardguard report`: events.jsonl read into
// the timeline model (supervisor/timeline.h), the restart budgets of a job config, whether a
// `shardguard run` still answers in the run dir, and the size of a committed checkpoint.
// Thread-safety: plain functions and values; EventsTail belongs to one caller.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "supervisor/job_config.h"
#include "supervisor/timeline.h"

namespace shardguard::cli {

struct RunDirTimeline {
  supervisor::Timeline timeline;
  std::string events_path;
  // A `shardguard run` accepts connections on <run_dir>/agent.sock: the run is live.
  bool supervisor_alive = false;
  // The time the view is taken at: now while the run is live; the last record's time when no
  // supervisor answers (a killed run must not accrue time it did not spend).
  int64_t now_unix_ms = 0;
  uint64_t bytes_read = 0;  // where a follower goes on
};

// The [restart.*] budgets of a job config, by exit class name, as the timeline wants them.
supervisor::RestartBudgets budgets_of(const supervisor::JobConfig& config);
// The same, read from the job config at `path` (errors name the file, line and key).
Result<supervisor::RestartBudgets> budgets_from_config(const std::string& path);

// An empty timeline of <run_dir>/events.jsonl, for following a run that has not begun.
RunDirTimeline empty_run_dir(const std::string& run_dir);

// Reads <run_dir>/events.jsonl (kNotFound when there is none) into a timeline.
Result<RunDirTimeline> load_run_dir(const std::string& run_dir,
                                    const supervisor::RestartBudgets& budgets);

// True when something accepts connections on the run dir's agent socket.
bool supervisor_listening(const std::string& run_dir);

// Total bytes of the files a manifest lists; nullopt when it cannot be read (gone by retention).
std::optional<uint64_t> manifest_bytes(const std::string& manifest_path);

// The complete lines appended to a file since the last poll. A torn last line waits for its
// end; a file that shrank (replaced) is read again from its start.
class EventsTail {
 public:
  EventsTail(std::string path, uint64_t offset) : path_(std::move(path)), offset_(offset) {}
  // New complete lines, without their '\n'; at most `max_bytes` are read per call.
  Result<std::vector<std::string>> poll(uint64_t max_bytes = 1 << 20);
  bool restarted() const { return restarted_; }  // the last poll found the file had shrunk

 private:
  std::string path_;
  uint64_t offset_;
  std::string partial_;
  bool restarted_ = false;
};

}  // namespace shardguard::cli
