// shardguard: the command-line entry point. Each subcommand group lives in its own file
// (cli/*_commands.cc) and registers itself on the CLI11 app here.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>

#include "cli/ckpt_commands.h"
#include "cli/report_command.h"
#include "core/exit_codes.h"
#include "cli/run_command.h"
#include "cli/secret_command.h"
#include "cli/simulate_command.h"
#include "core/logging.h"
#include "supervisor/job_config_toml.h"

int main(int argc, char** argv) {
  using namespace shardguard;
  CLI::App app{
      "shardguard: keeps long training runs alive on preemptible machines.\n"
      "Sharded checkpoints, preemption notices, and restarts from the newest complete one.",
      "shardguard"};
  app.set_version_flag("--version", std::string("shardguard ") + SHARDGUARD_VERSION);
  std::string log_level = "info";
  std::string log_format = "text";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
  app.add_option("--log-format", log_format, "text or json")->capture_default_str();
  app.require_subcommand(0, 1);
  int exit_code = kExitOk;
  cli::add_ckpt_commands(app, &exit_code);
  cli::add_run_command(app, &exit_code);
  cli::add_status_command(app, &exit_code);
  cli::add_report_command(app, &exit_code);
  cli::add_drain_command(app, &exit_code);
  cli::add_agent_command(app, &exit_code);
  cli::add_coordinator_command(app, &exit_code);
  cli::add_secret_command(app, &exit_code);
  cli::add_simulate_command(app, &exit_code);

  // Logging is set up before any subcommand callback runs: from the flags, else from [log]
  // of the config `run` or `agent` was given (a key that parses must also act); the
  // environment overrides both (setup_logging). A config that does not load is reported
  // by the subcommand itself.
  app.parse_complete_callback([&] {
    for (const char* name : {"run", "agent"}) {
      const CLI::App* sub = app.get_subcommand(name);
      if (!sub->parsed() || sub->count("--config") == 0) continue;
      auto cfg = supervisor::load_job_config(sub->get_option("--config")->as<std::string>());
      if (!cfg.ok()) continue;
      if (app.count("--log-level") == 0) log_level = cfg->log_level;
      if (app.count("--log-format") == 0) log_format = cfg->log_format;
    }
    auto format = parse_log_format(log_format);
    Status st = format.ok() ? setup_logging({*format, log_level}) : Status(format.error());
    if (!st.ok()) throw CLI::ValidationError("logging", st.error().message());
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardguard: internal error: %s\n", e.what());
    return kExitFailure;
  }
  if (app.get_subcommands().empty()) {
    std::fputs(app.help().c_str(), stdout);
    return kExitOk;
  }
  return exit_code;
}
