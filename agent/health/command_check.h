// The "command:<name>" check: runs an operator's command (e.g. `dcgmi diag -r 1`, a site
// script) in its own process group through io::ProcessLauncher. Exit 0 is healthy; a
// non-zero exit, a launch failure or the timeout is a warning-level failure. At the timeout
// the whole group gets SIGTERM, then SIGKILL after the kill grace, and the run answers once
// no process of the group is left.
//
// Thread-safety: none; runs on the loop thread (HealthCheck).
#pragma once

#include <cstdint>
#include <memory>

#include "agent/callback_guard.h"
#include "agent/health/health_check.h"
#include "agent/health/health_config.h"
#include "core/clock.h"

namespace shardguard::io {
class EventLoop;
class ProcessLauncher;
class ChildProcess;
}  // namespace shardguard::io

namespace shardguard::agent {

class CommandCheck final : public HealthCheck {
 public:
  // `loop`, `launcher` and `timers` must outlive the check. Destroying it mid-run kills the
  // command's process group.
  CommandCheck(CommandCheckSettings settings, io::EventLoop& loop, io::ProcessLauncher& launcher,
               TimerFactory& timers);
  ~CommandCheck() override;

  std::string_view name() const override { return name_; }
  // A run still in progress when the next starts is abandoned (its group killed).
  void run(Done done) override;

 private:
  // Tears the process group down (SIGTERM, grace, SIGKILL, reap), then answers `outcome`
  // unless `report_after` is false (an abandoned run).
  void kill_group(std::string outcome, bool success, bool report_after);
  void report(std::string outcome, bool success);
  std::string output_tail();

  CommandCheckSettings settings_;
  std::string name_;
  io::EventLoop& loop_;
  io::ProcessLauncher& launcher_;
  std::unique_ptr<Timer> timer_;
  std::unique_ptr<io::ChildProcess> child_;
  Done done_;
  uint64_t output_offset_ = 0;
  uint64_t run_id_ = 0;
  CallbackGuard guard_;
};

}  // namespace shardguard::agent
