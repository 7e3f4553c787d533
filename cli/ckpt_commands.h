// `shardguard ckpt ...`: list, verify, inspect, garbage-collect and export checkpoints.
// Output is stable and scriptable; listings take --json.
#pragma once

namespace CLI {
class App;
}

namespace shardguard::cli {

// Registers the `ckpt` subcommand group; the chosen command stores its exit code in
// `*exit_code` when it runs.
void add_ckpt_commands(CLI::App& app, int* exit_code);

}  // namespace shardguard::cli
