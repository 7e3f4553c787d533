#include "agent/signal_source.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <charconv>

namespace shardguard::agent {

namespace {

struct NamedSignal {
  std::string_view name;
  int number;
};
constexpr NamedSignal kSignals[] = {
    {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"ABRT", SIGABRT}, {"USR1", SIGUSR1},
    {"USR2", SIGUSR2}, {"ALRM", SIGALRM}, {"TERM", SIGTERM}, {"CONT", SIGCONT}, {"TSTP", SIGTSTP},
    {"XCPU", SIGXCPU}, {"PWR", SIGPWR},   {"KILL", SIGKILL}, {"STOP", SIGSTOP},
};

}  // namespace

Result<int> parse_signal(std::string_view text) {
  std::string upper;
  for (char c : text) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::string_view name = upper;
  if (name.substr(0, 3) == "SIG") name.remove_prefix(3);
  int sig = 0;
  auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), sig);
  if (ec != std::errc() || end != name.data() + name.size()) {
    sig = 0;
    for (const auto& s : kSignals) {
      if (s.name == name) sig = s.number;
    }
  }
  if (sig <= 0 || sig >= NSIG) {
    return Error(ErrorCode::kInvalid, "signal '" + std::string(text) + "': unknown");
  }
  if (sig == SIGKILL || sig == SIGSTOP) {
    return Error(ErrorCode::kInvalid, "signal '" + std::string(text) + "': cannot be caught");
  }
  return sig;
}

std::string signal_name(int sig) {
  for (const auto& s : kSignals) {
    if (s.number == sig) return "SIG" + std::string(s.name);
  }
  return "signal " + std::to_string(sig);
}

SignalSource::SignalSource(SignalSourceConfig config, io::EventLoop& loop, const Clock& clock)
    : config_(std::move(config)), clock_(clock), watcher_(loop) {}

SignalSource::~SignalSource() { stop(); }

void SignalSource::start(Callback on_notice) {
  stop();
  set_callback(std::move(on_notice));
  for (const SignalSpec& spec : config_.signals) {
    Status s =
        watcher_.watch(spec.signal, [this, grace = spec.grace](int sig) { on_signal(sig, grace); });
    if (!s.ok()) {
      count_error();
      spdlog::warn("signal: cannot watch {}: {}", signal_name(spec.signal), s.error().message());
    }
  }
}

void SignalSource::stop() {
  watcher_.cancel();
  clear_callback();
}

void SignalSource::on_signal(int sig, Duration grace) {
  count_poll();
  Notice n;
  n.source = "signal";
  n.kind = signal_name(sig);  // "SIGTERM" -> "sigterm"
  for (char& c : n.kind) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  n.deadline = clock_.wall_now() + grace;
  n.detail = signal_name(sig) + " received";
  // Every arrival is a notice: a repeated SIGTERM or SIGINT escalates (the supervisor decides).
  n.event_id = signal_name(sig) + "#" + std::to_string(++arrivals_);
  n.is_preemption = true;
  deliver(n.event_id, n);
}

}  // namespace shardguard::agent
