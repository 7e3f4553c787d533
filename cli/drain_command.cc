// `shardguard drain --run-dir R [--deadline 60s] [--reason TEXT]`: an operator's "checkpoint
// and stop" for a running `shardguard run`, sent over its agent socket (agent/agent_channel.h).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "agent/agent_channel.h"
#include "core/exit_codes.h"
#include "core/units.h"
#include "supervisor/rank_env.h"

namespace shardguard::cli {
namespace {

struct DrainArgs {
  std::string run_dir;
  std::string deadline = "60s";
  std::string reason = "operator drain";
};

int drain(const DrainArgs& a) {
  auto within = parse_duration(a.deadline);
  if (!within.ok()) {
    std::fprintf(stderr, "shardguard drain: --deadline: %s\n", within.error().message().c_str());
    return kExitUsage;
  }
  agent::Notice n;
  n.source = "drain";
  n.kind = "drain";
  n.detail = a.reason;
  n.deadline = RealClock::instance().wall_now() + *within;
  n.is_preemption = true;
  const std::string path = agent::agent_socket_path(supervisor::absolute_path(a.run_dir));
  auto state = agent::send_notice(path, n);
  if (!state.ok()) {
    std::fprintf(stderr, "shardguard drain: %s\n", state.error().message().c_str());
    return kExitFailure;
  }
  std::printf("drain requested: the run in '%s' checkpoints and stops within %s (now %s)\n",
              a.run_dir.c_str(), format_duration(*within).c_str(), state->c_str());
  return kExitOk;
}

}  // namespace

void add_drain_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<DrainArgs>();
  auto* cmd = app.add_subcommand("drain", "Ask a running `shardguard run` to checkpoint and stop");
  cmd->add_option("--run-dir", a->run_dir, "the run directory of `shardguard run`")->required();
  cmd->add_option("--deadline", a->deadline, "time the job has to checkpoint")->capture_default_str();
  cmd->add_option("--reason", a->reason, "recorded in the events")->capture_default_str();
  cmd->callback([a, exit_code] { *exit_code = drain(*a); });
}

}  // namespace shardguard::cli
