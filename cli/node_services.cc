#include "cli/node_services.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "agent/agent_channel.h"
#include "agent/embedded_agent.h"
#include "agent/health/health_setup.h"
#include "checkpoint/catalog.h"
#include "storage/location.h"
#include "supervisor/rank_env.h"

namespace shardguard::cli {

struct NodeServices::Impl {
  io::Deps d;
  supervisor::JobConfig cfg;
  NoticeSink sink;
  agent::EmbeddedAgent node_agent;
  std::unique_ptr<agent::AgentSocketServer> socket;
  std::unique_ptr<agent::HealthMonitor> monitor;

  Impl(const io::Deps& deps, const supervisor::JobConfig& c, NoticeSink s)
      : d(deps), cfg(c), sink(std::move(s)), node_agent(deps, cfg.agent, cfg.grace) {}
};

NodeServices::NodeServices(const io::Deps& deps, const supervisor::JobConfig& config,
                           NoticeSink sink)
    : impl_(std::make_unique<Impl>(deps, config, std::move(sink))) {}

NodeServices::~NodeServices() { stop(); }

Status NodeServices::start() {
  Impl& m = *impl_;
  m.socket = std::make_unique<agent::AgentSocketServer>(
      m.d.loop, agent::agent_socket_path(supervisor::absolute_path(m.cfg.run_dir)), ::getuid(),
      [&m](const agent::Notice& n) -> Result<std::string> {
        if (m.sink.finished()) return Error(ErrorCode::kInvalid, "the run has finished");
        m.sink.notice(n);
        return m.sink.state();
      });
  SG_RETURN_IF_ERROR(m.socket->start());
  // Node health: a fatal finding (a GPU fell off the bus, uncorrectable ECC, disk full) stops
  // the job with an emergency checkpoint so the scheduler moves it.
  agent::HealthSettings health = m.cfg.node_health;
  // A bucket is no local disk to watch (a bucket has no "full"); a directory's disk is.
  const bool bucket = storage::is_bucket_url(m.cfg.checkpoint_dir);
  if (health.checkpoint_dir.empty() && !bucket) health.checkpoint_dir = m.cfg.checkpoint_dir;
  // The disk check compares free space with one checkpoint: the newest complete one's size
  // unless [health] checkpoint_size_estimate says otherwise. Unknown on a first run.
  if (health.checkpoint_size_estimate == 0 && !health.checkpoint_dir.empty()) {
    auto newest = checkpoint::latest_complete(m.d.fs, health.checkpoint_dir,
                                              checkpoint::Verify::kSize);
    if (newest.ok() && newest->manifest)
      health.checkpoint_size_estimate = newest->manifest->total_bytes();
  }
  m.monitor = agent::make_health_monitor(health, m.d);
  if (m.monitor && health.enabled) {
    m.monitor->start(
        [&m](const std::vector<agent::HealthFinding>& evidence) {
          std::string text;
          for (const auto& f : evidence) text += (text.empty() ? "" : "; ") + f.check + ": " + f.evidence;
          m.sink.unhealthy(text);
        },
        [] { spdlog::info("node healthy again"); });
  }
  // SIGTERM (Kubernetes, Slurm), SIGINT (a person), the configured notice signals (Slurm
  // --signal) and cloud notices, typed.
  if (auto st = m.node_agent.start([&m](const agent::Notice& n) { m.sink.notice(n); }); !st.ok()) {
    spdlog::error("agent: {}", st.error().message());
    m.sink.unhealthy("the node agent could not start: " + st.error().message());
  }
  return {};
}

void NodeServices::stop() {
  Impl& m = *impl_;
  m.node_agent.stop();
  if (m.socket) m.socket->stop();
  if (m.monitor) m.monitor->stop();
}

void NodeServices::acknowledge(const agent::Notice& notice) { impl_->node_agent.acknowledge(notice); }

}  // namespace shardguard::cli
