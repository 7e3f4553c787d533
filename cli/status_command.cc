// `shardguard status --run-dir R`: the events timeline as a table.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <ctime>

#include "core/exit_codes.h"
#include "cli/run_command.h"
#include "core/filesystem.h"
#include "supervisor/event_log.h"

namespace shardguard::cli {
namespace {

int status(const std::string& run_dir) {
  auto events = supervisor::read_events(join_path(run_dir, "events.jsonl"));
  if (!events.ok()) {
    std::fprintf(stderr, "shardguard status: %s\n", events.error().message().c_str());
    return kExitFailure;
  }
  if (events->empty()) {
    std::printf("no events in '%s'\n", run_dir.c_str());
    return kExitOk;
  }
  const int64_t t0 = events->front().time_unix_ms;
  std::printf("%-10s %-22s %s\n", "T+SECONDS", "EVENT", "DETAILS");
  for (const auto& e : *events) {
    std::string details;
    for (const auto& [k, v] : e.fields) details += (details.empty() ? "" : " ") + k + "=" + v;
    std::printf("%-10.3f %-22s %s\n", double(e.time_unix_ms - t0) / 1000.0, e.type.c_str(),
                details.c_str());
  }
  return kExitOk;
}

}  // namespace

void add_status_command(CLI::App& app, int* exit_code) {
  auto run_dir = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("status", "Show a run's timeline (launches, notices, "
                                           "checkpoints, exits, restarts)");
  cmd->add_option("--run-dir", *run_dir, "the run directory of `shardguard run`")->required();
  cmd->callback([run_dir, exit_code] { *exit_code = status(*run_dir); });
}

}  // namespace shardguard::cli
