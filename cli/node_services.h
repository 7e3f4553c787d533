// What every `shardguard run` process serves on its node, whatever its role (a single-node
// run, the node that embeds the coordinator, a plain node): the embedded agent (signals and
// cloud notices), the agent socket (`shardguard drain`, the root agent) and the node's health
// checks. Where notices go is the caller's: the supervisor, or the coordinator over the
// network. Thread-safety: loop thread only.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "agent/notice.h"
#include "core/result.h"
#include "io/deps.h"
#include "supervisor/job_config.h"

namespace shardguard::cli {

struct NoticeSink {
  std::function<void(const agent::Notice&)> notice;
  std::function<void(const std::string& evidence)> unhealthy;
  std::function<std::string()> state;  // the answer to `shardguard drain`
  std::function<bool()> finished;
};

class NodeServices {
 public:
  NodeServices(const io::Deps& deps, const supervisor::JobConfig& config, NoticeSink sink);
  ~NodeServices();
  // Starts the agent socket, the health checks and the notice sources.
  Status start();
  void stop();
  // Acknowledges a notice to its provider (Azure StartRequests).
  void acknowledge(const agent::Notice& notice);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::cli
