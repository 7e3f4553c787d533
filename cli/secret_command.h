// `shardguard secret generate FILE`: writes a new shared secret for multi-node jobs (mode 0600,
// never overwriting), and `shardguard secret check FILE`: says whether a secret file would be
// accepted, and why not.
#pragma once

namespace CLI {
class App;
}

namespace shardguard::cli {

void add_secret_command(CLI::App& app, int* exit_code);

}  // namespace shardguard::cli
