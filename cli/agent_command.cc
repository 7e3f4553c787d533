// `shardguard agent --config agent.toml`: the node agent on its own, for nodes where the
// training job's supervisor cannot watch the metadata service itself (a container without
// access to it, a scheduler's prolog): it runs the same notice sources as the agent inside
// `shardguard run` and, on a notice, prints it as a JSON line, fires the [[hooks]]
// (preempt_notice), and passes it to the local runs listed in [agent] run_dirs through each
// run's agent socket, so that each `shardguard run` checkpoints before the deadline.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include <cstdio>

#include "agent/agent_channel.h"
#include "agent/embedded_agent.h"
#include "cli/production_deps.h"
#include "core/exit_codes.h"
#include "cli/run_command.h"
#include "core/logging.h"
#include "hooks/lifecycle.h"
#include "io/event_loop.h"
#include "io/http_client.h"
#include "io/process.h"
#include "supervisor/job_config_toml.h"
#include "supervisor/rank_env.h"

namespace shardguard::cli {
namespace {

int run_agent(const std::string& config_path, bool once) {
  auto cfg = supervisor::load_job_config(config_path);
  if (!cfg.ok()) {
    std::fprintf(stderr, "shardguard agent: %s\n", cfg.error().message().c_str());
    return kExitUsage;
  }
  ProductionDeps production;
  const io::Deps& deps = production.deps();
  auto hooks = hooks::LifecycleHooks::create(deps.loop, deps.launcher, deps.http, deps.timers,
                                             deps.clock, cfg->hooks);
  if (!hooks.ok()) {
    std::fprintf(stderr, "shardguard agent: hooks: %s\n", hooks.error().message().c_str());
    return kExitUsage;
  }
  agent::EmbeddedAgent node_agent(deps, cfg->agent, cfg->grace);
  bool done = false;
  auto on_notice = [&](const agent::Notice& n) {
    std::printf("{\"source\":\"%s\",\"kind\":\"%s\",\"deadline_unix_ms\":%lld,\"preemption\":%s}\n",
                json_escape(n.source).c_str(), json_escape(n.kind).c_str(),
                static_cast<long long>(to_unix_ms(n.deadline)), n.is_preemption ? "true" : "false");
    std::fflush(stdout);
    if (!n.is_preemption) return;
    (*hooks)->fire("preempt_notice", {{"source", n.source}, {"kind", n.kind},
                                      {"deadline_unix_ms", std::to_string(to_unix_ms(n.deadline))}});
    for (const auto& dir : cfg->agent.run_dirs) {
      auto state = agent::send_notice(agent::agent_socket_path(supervisor::absolute_path(dir)), n);
      if (!state.ok()) spdlog::error("agent: run in '{}': {}", dir, state.error().message());
      else spdlog::warn("agent: the run in '{}' took the notice ({})", dir, *state);
    }
    if (once) done = true;
  };
  if (auto st = node_agent.start(on_notice); !st.ok()) {
    std::fprintf(stderr, "shardguard agent: %s\n", st.error().message().c_str());
    return kExitUsage;
  }
  spdlog::info("agent: running ({} run dir(s) to drain on a notice)", cfg->agent.run_dirs.size());
  while (!done) production.loop().run_until([&] { return done; }, std::chrono::hours(24));
  node_agent.stop();
  // Give the hooks a moment to go out.
  production.loop().run_for(std::chrono::seconds(2));
  return kExitOk;
}

}  // namespace

void add_agent_command(CLI::App& app, int* exit_code) {
  auto config = std::make_shared<std::string>();
  auto once = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("agent", "Run the node agent alone: watch for preemption "
                                          "notices and drain local runs");
  cmd->add_option("--config", *config, "agent config (TOML: [agent], [[hooks]])")->required();
  cmd->add_flag("--once", *once, "exit after the first preemption notice");
  cmd->callback([config, once, exit_code] { *exit_code = run_agent(*config, *once); });
}

}  // namespace shardguard::cli
