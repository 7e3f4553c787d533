// An operator's drain request as a notice: a file at a configured path (written by
// `shardguard drain`, or by hand) holding nothing or {"deadline_unix_ms": ms, "reason": "..."}.
// The file is checked at start and every poll interval; each distinct content is reported
// once (a rewrite with another deadline is a new notice); removing the file re-arms it.
//
// Thread-safety: construct, start, stop on the loop thread; see NoticeSource.
// write_drain_request() is thread-safe (it only touches the filesystem).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "agent/backoff.h"
#include "agent/callback_guard.h"
#include "agent/notice.h"
#include "core/filesystem.h"

namespace shardguard::agent {

struct DrainRequest {
  std::optional<WallTime> deadline;  // none: the source's default grace applies
  std::string reason;
};

// Parses a drain file: empty or whitespace only is a request without deadline or reason.
// kInvalid names what is wrong (not JSON, wrong field types).
Result<DrainRequest> parse_drain_request(std::string_view text);

// Writes the drain file atomically (temp file, fsync, rename), creating its directory.
// For the `shardguard drain` CLI.
Status write_drain_request(Filesystem& fs, const std::string& path,
                           std::optional<WallTime> deadline, std::string_view reason);

struct DrainSourceConfig {
  std::string path;  // the drain file
  Duration poll_interval = std::chrono::seconds(1);
  Duration default_grace = std::chrono::seconds(60);  // deadline when the file names none
};

class DrainSource final : public NoticeSource {
 public:
  // `fs`, `clock` and `timers` must outlive the source.
  DrainSource(DrainSourceConfig config, Filesystem& fs, const Clock& clock, TimerFactory& timers);
  ~DrainSource() override;

  std::string_view name() const override { return "drain"; }
  void start(Callback on_notice) override;
  void stop() override;

 private:
  void check();

  DrainSourceConfig config_;
  Filesystem& fs_;
  const Clock& clock_;
  PollTimer timer_;
  int episode_ = 0;  // bumped each time the file disappears
  bool present_ = false;
  CallbackGuard guard_;
};

}  // namespace shardguard::agent
