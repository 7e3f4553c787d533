// Signal logs of test jobs: which process got which signal, from whom, and when. A job's
// processes write them with sg_signal_recorder (tests/support/signal_recorder.cc, a stand-in
// process; a batch script `exec`s it to record its own shell); tests read them back with
// parse_signal_log(). Line format: "<unix seconds.micro> <who> <event> [k=v ...]", where
// event is "start" (k=v: pid, pgid, node, nodeid, procid, restart, job), a signal name
// without SIG ("TERM", "USR1", ...; k=v: from=<pid>:<comm>, code=<si_code>) or "exit"
// (k=v: code; never written for SIGKILL, which cannot be caught).
//
// Thread-safety: plain functions on values.
#pragma once

#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace shardguard::testing {

struct SignalEvent {
  double time = 0;  // unix seconds
  std::string who, event;
  std::map<std::string, std::string> info;  // the k=v fields
};

inline std::vector<SignalEvent> parse_signal_log(const std::string& text) {
  std::vector<SignalEvent> events;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    SignalEvent e;
    if (!(in >> e.time >> e.who >> e.event)) continue;
    for (std::string kv; in >> kv;) {
      const auto eq = kv.find('=');
      if (eq != std::string::npos) e.info[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    events.push_back(std::move(e));
  }
  return events;
}

// The events of `who` in order, as "EVENT" strings ("start", "CONT", "TERM", ...).
inline std::vector<std::string> events_of(const std::vector<SignalEvent>& log,
                                          const std::string& who) {
  std::vector<std::string> out;
  for (const auto& e : log)
    if (e.who == who) out.push_back(e.event);
  return out;
}

// The first `event` of `who` (nullopt if none).
inline std::optional<SignalEvent> first_event(const std::vector<SignalEvent>& log,
                                              const std::string& who, const std::string& event) {
  for (const auto& e : log)
    if (e.who == who && e.event == event) return e;
  return std::nullopt;
}

// Every event, one per line, as "WHO EVENT @+seconds [from PID:COMM]" relative to `t0`.
inline std::string describe_events(const std::vector<SignalEvent>& log, double t0) {
  std::ostringstream s;
  s.precision(3);
  s << std::fixed;
  for (const auto& e : log) {
    s << e.who << " " << e.event << " @+" << (e.time - t0) << "s";
    if (auto from = e.info.find("from"); from != e.info.end()) s << " from " << from->second;
    s << "\n";
  }
  return s.str();
}

// The sg_signal_recorder binary (tests/support/signal_recorder.cc): $SG_SIGNAL_RECORDER, or
// the path compiled in as SG_SIGNAL_RECORDER by the test's CMakeLists.
inline std::string signal_recorder_bin() {
  if (const char* env = std::getenv("SG_SIGNAL_RECORDER")) return env;
#ifdef SG_SIGNAL_RECORDER
  return SG_SIGNAL_RECORDER;
#else
  return "sg_signal_recorder";
#endif
}

}  // namespace shardguard::testing
