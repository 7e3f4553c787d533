// The node agent as a component: runs the configured notice sources (cloud metadata,
// signals) on the loop and hands every notice to one callback, typed (agent/notice.h).
// Embedded in `shardguard run`, where the callback is the supervisor; used alone by
// `shardguard agent`. An operator's drain comes through the run's agent socket
// (agent/agent_channel.h), not through this component. Thread-safety: loop thread only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/agent_config.h"
#include "agent/notice.h"
#include "core/result.h"
#include "io/deps.h"

namespace shardguard::agent {

class EmbeddedAgent {
 public:
  // `default_grace` is the budget of SIGTERM/SIGINT. Everything in `deps` must outlive it.
  EmbeddedAgent(const io::Deps& deps, AgentSettings settings, Duration default_grace);
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
