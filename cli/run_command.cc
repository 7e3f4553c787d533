#include "cli/run_command.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <filesystem>

#include "cli/production_deps.h"
#include "cli/slurm_integration.h"
#include "core/exit_codes.h"
#include "io/event_loop.h"
#include "io/http_server.h"
#include "io/process.h"
#include "agent/agent_channel.h"
#include "agent/embedded_agent.h"
#include "agent/health/health_setup.h"
#include "hooks/lifecycle.h"
#include "io/http_client.h"
#include "supervisor/job_config_toml.h"
#include "supervisor/rank_env.h"
#include "supervisor/supervisor.h"

namespace shardguard::cli {
namespace {

struct RunArgs {
  std::string config_path;
  std::optional<uint32_t> nproc;
  std::optional<std::string> checkpoint_dir, run_dir, job_id;
  bool resume_from_job = false;
  std::optional<uint32_t> max_restarts;
  std::optional<uint16_t> metrics_port;
  std::optional<uint64_t> every_steps;
  bool check_config = false;
  std::vector<std::string> command;
};

Result<supervisor::JobConfig> build_config(const RunArgs& a) {
  supervisor::JobConfig cfg;
  if (!a.config_path.empty()) {
    SG_ASSIGN_OR_RETURN(cfg, supervisor::load_job_config(a.config_path));
  }
  if (a.nproc) cfg.nproc = *a.nproc;
  if (a.checkpoint_dir) cfg.checkpoint_dir = *a.checkpoint_dir;
  if (a.run_dir) cfg.run_dir = *a.run_dir;
  if (a.job_id) cfg.job_id = *a.job_id;
  if (a.every_steps) {
    cfg.interval_mode = supervisor::IntervalMode::kSteps;
    cfg.every_steps = *a.every_steps;
  }
  if (a.max_restarts) cfg.crash.max_restarts = cfg.hang.max_restarts = *a.max_restarts;
  if (a.metrics_port) cfg.metrics_port = *a.metrics_port;
  if (!a.command.empty()) cfg.command = a.command;
  if (cfg.command.empty())
    return Error(ErrorCode::kInvalid, "no command: give one after `--` or as job.command");
  if (cfg.nproc == 0) return Error(ErrorCode::kInvalid, "--nproc must be at least 1");
  if (a.resume_from_job) {
    if (cfg.job_id.empty())
      return Error(ErrorCode::kInvalid, "--resume-from-job needs the new job id (--job-id)");
    cfg.resume_from_job = true;
  }
  return cfg;
}

int run(const RunArgs& a) {
  auto cfg = build_config(a);
  if (!cfg.ok()) {
    std::fprintf(stderr, "shardguard run: %s\n", cfg.error().message().c_str());
    return kExitUsage;
  }
  if (a.check_config) {
    std::printf("config OK: job '%s', %u rank(s) of '%s', checkpoints in '%s', run dir '%s'\n",
                cfg->job_id.empty() ? "(the checkpoint directory's)" : cfg->job_id.c_str(),
                cfg->nproc, cfg->command[0].c_str(), cfg->checkpoint_dir.c_str(),
                cfg->run_dir.c_str());
    return kExitOk;
  }
  if (auto st = io::become_child_subreaper(); !st.ok())
    spdlog::warn("cannot become a subreaper ({}); orphaned grandchildren may escape teardown",
                 st.error().message());
  ProductionDeps production;
  const io::Deps& deps = production.deps();
  auto slurm = SlurmIntegration::attach(deps, *cfg);  // inside a Slurm job: its defaults
  supervisor::Supervisor sup(deps, *cfg);

  // The job's [[hooks]]: commands and webhooks on lifecycle events, never blocking the loop.
  auto hooks = hooks::LifecycleHooks::create(deps.loop, deps.launcher, deps.http, deps.timers,
                                             deps.clock, cfg->hooks);
  if (!hooks.ok()) {
    std::fprintf(stderr, "shardguard run: hooks: %s\n", hooks.error().message().c_str());
    return kExitUsage;
  }
  sup.set_on_lifecycle([&](std::string_view event, std::map<std::string, std::string> fields) {
    slurm->observe(event, fields);
    (*hooks)->fire(event, std::move(fields));
  });

  // The embedded agent: SIGTERM (Kubernetes, Slurm GraceTime), SIGINT (a person), the
  // configured notice signals (Slurm --signal) and cloud notices, typed, to the supervisor.
  agent::EmbeddedAgent node_agent(deps, cfg->agent, cfg->grace);
  sup.set_on_acknowledge([&](const agent::Notice& n) { node_agent.acknowledge(n); });

  // The agent socket: `shardguard drain` and the standalone `shardguard agent` (root).
  agent::AgentSocketServer agent_socket(
      deps.loop, agent::agent_socket_path(supervisor::absolute_path(cfg->run_dir)), ::getuid(),
      [&](const agent::Notice& n) -> Result<std::string> {
        if (sup.finished()) return Error(ErrorCode::kInvalid, "the run has finished");
        sup.notice(n);
        return sup.state();
      });

  // Prometheus metrics, on loopback unless SHARDGUARD_METRICS_ADDRESS says otherwise.
  std::unique_ptr<io::HttpServer> metrics;
  if (cfg->metrics_port != 0) {
    const char* addr = std::getenv("SHARDGUARD_METRICS_ADDRESS");
    metrics = std::make_unique<io::HttpServer>(deps.loop, addr ? addr : "127.0.0.1", cfg->metrics_port);
    metrics->handle("/metrics", [&] { return io::HttpReply{200, "text/plain; version=0.0.4", sup.metrics_text()}; });
    if (auto st = metrics->start(); !st.ok()) {
      std::fprintf(stderr, "shardguard run: metrics: %s\n", st.error().message().c_str());
      return kExitUsage;
    }
    spdlog::info("metrics on http://{}:{}/metrics", addr ? addr : "127.0.0.1", metrics->port());
  }

  if (auto st = sup.start(); !st.ok()) {
    std::fprintf(stderr, "shardguard run: %s\n", st.error().message().c_str());
    // A directory that is another job's, or requeues that keep failing: requeue will not help.
    return st.error().code() == ErrorCode::kFenced ? kExitConfig : kExitFailure;
  }
  if (auto st = agent_socket.start(); !st.ok()) {
    std::fprintf(stderr, "shardguard run: agent socket: %s\n", st.error().message().c_str());
    return kExitFailure;
  }
  // Node health: a fatal finding (a GPU fell off the bus, uncorrectable ECC, disk full)
  // stops the job with an emergency checkpoint so the scheduler moves it.
  agent::HealthSettings health = cfg->node_health;
  if (health.checkpoint_dir.empty()) health.checkpoint_dir = cfg->checkpoint_dir;
  auto monitor = agent::make_health_monitor(health, deps);
  if (monitor && health.enabled) {
    monitor->start(
        [&](const std::vector<agent::HealthFinding>& evidence) {
          std::string text;
          for (const auto& f : evidence) text += (text.empty() ? "" : "; ") + f.check + ": " + f.evidence;
          sup.report_unhealthy(text);
        },
        [] { spdlog::info("node healthy again"); });
  }

  if (auto st = node_agent.start([&](const agent::Notice& n) { sup.notice(n); }); !st.ok()) {
    std::fprintf(stderr, "shardguard run: agent: %s\n", st.error().message().c_str());
    sup.report_unhealthy("the node agent could not start: " + st.error().message());
  }
  while (!sup.finished()) production.loop().run_until([&] { return sup.finished(); }, std::chrono::hours(24));
  // Let the last teardown's kills and the finish hooks go out.
  production.loop().run_for(std::chrono::milliseconds(50));
  node_agent.stop();
  agent_socket.stop();
  if (monitor) monitor->stop();
  if (metrics) metrics->stop();
  return slurm->finish(sup.exit_code());  // Slurm: requeue by its table
}

}  // namespace

void add_run_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<RunArgs>();
  auto* run_cmd = app.add_subcommand("run", "Run a training command under supervision: restarts, "
                                            "emergency checkpoints, resume");
  run_cmd->add_option("--config", a->config_path, "job config (TOML)");
  run_cmd->add_option("--nproc", a->nproc, "ranks to start on this node");
  run_cmd->add_option("--checkpoint-dir", a->checkpoint_dir, "where checkpoints go");
  run_cmd->add_option("--run-dir", a->run_dir, "logs, events and the control socket");
  run_cmd->add_option("--job-id", a->job_id,
                      "stable job name (default: the checkpoint directory's, or a new one)");
  run_cmd->add_flag("--resume-from-job", a->resume_from_job,
                    "take over a checkpoint directory that belongs to another job id");
  run_cmd->add_option("--max-restarts", a->max_restarts, "crash and hang restarts per window");
  run_cmd->add_option("--checkpoint-every", a->every_steps, "checkpoint every N steps");
  run_cmd->add_option("--metrics-port", a->metrics_port, "serve Prometheus metrics on this port");
  run_cmd->add_flag("--check-config", a->check_config, "validate the configuration and exit");
  run_cmd->add_option("command", a->command, "the training command, after --");
  run_cmd->callback([a, exit_code] { *exit_code = run(*a); });
}

}  // namespace shardguard::cli
