// `shardguard run [--config job.toml] [flags] -- CMD ARGS...`: the supervisor on one node,
// and `shardguard status --run-dir R`: the run's timeline as a table.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace shardguard::cli {

void add_run_command(CLI::App& app, int* exit_code);
void add_drain_command(CLI::App& app, int* exit_code);
void add_agent_command(CLI::App& app, int* exit_code);
void add_coordinator_command(CLI::App& app, int* exit_code);
void add_status_command(CLI::App& app, int* exit_code);

}  // namespace shardguard::cli
