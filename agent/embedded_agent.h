// The node agent as a component: runs the configured notice sources (cloud metadata,
// signals, the drain file) on the loop and hands every notice to one callback. Embedded in
// `shardguard run`, where the callback is the supervisor's emergency flow; used alone by
// `shardguard agent`. Thread-safety: loop thread only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/agent_config.h"
#include "agent/notice.h"
#include "core/clock.h"
#include "core/filesystem.h"
#include "core/result.h"

namespace shardguard::io {
class EventLoop;
class HttpClient;
}  // namespace shardguard::io

namespace shardguard::agent {

class EmbeddedAgent {
 public:
  // `default_grace` is the budget of SIGTERM/SIGINT; `drain_file` is used when the settings
  // name none.
  EmbeddedAgent(io::EventLoop& loop, const Clock& clock, TimerFactory& timers, Filesystem& fs,
                AgentSettings settings, Duration default_grace, std::string drain_file);
  ~EmbeddedAgent();

  // Starts every source (cloud detection first when clouds = "auto").
  Status start(NoticeSource::Callback on_notice);
  void stop();
  // Forwards to the source that produced `notice` (Azure's StartRequests).
  void acknowledge(const Notice& notice);
  // Names of the running sources, for the start-up log.
  std::vector<std::string> source_names() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::agent
