// Signals as notices: SIGTERM from Kubernetes (pod deletion, node shutdown) or Slurm
// (preemption with GraceTime, time limit), and the signal a Slurm job asked for with
// --signal (e.g. SIGUSR1 some seconds before its end). Every arrival of a watched signal is a
// notice (kind "sigterm", "sigusr1", ...) with deadline = arrival + that signal's grace; what a
// repeat means (SIGTERM/SIGINT again: escalate) is the supervisor's decision.
//
// Thread-safety: construct, start, stop on the loop thread; see NoticeSource. Watching a
// signal replaces its default action (SIGTERM no longer kills the agent) until stop().
#pragma once

#include <csignal>
#include <string>
#include <string_view>
#include <vector>

#include "agent/notice.h"
#include "core/result.h"
#include "io/signals.h"

namespace shardguard::agent {

struct SignalSpec {
  int signal = 0;
  Duration grace = std::chrono::seconds(30);  // Kubernetes' and Slurm KillWait's default
};

struct SignalSourceConfig {
  std::vector<SignalSpec> signals = {SignalSpec{SIGTERM, std::chrono::seconds(30)}};
};

// "SIGTERM", "TERM", "term", "15" -> 15. kInvalid names the text; SIGKILL and SIGSTOP are
// refused since they cannot be caught.
Result<int> parse_signal(std::string_view text);
// 15 -> "SIGTERM"; "signal 42" for numbers without a name here.
std::string signal_name(int sig);

class SignalSource final : public NoticeSource {
 public:
  // `loop` and `clock` must outlive the source.
  SignalSource(SignalSourceConfig config, io::EventLoop& loop, const Clock& clock);
  ~SignalSource() override;

  std::string_view name() const override { return "signal"; }
  // Watches every configured signal; one that cannot be watched is logged and counted as an
  // error.
  void start(Callback on_notice) override;
  void stop() override;

 private:
  void on_signal(int sig, Duration grace);

  SignalSourceConfig config_;
  const Clock& clock_;
  io::SignalWatcher watcher_;
  uint64_t arrivals_ = 0;
};

}  // namespace shardguard::agent
