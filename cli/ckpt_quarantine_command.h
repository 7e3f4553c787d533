// `shardguard ckpt quarantine` and `ckpt unquarantine`: thin wrappers over
// checkpoint/quarantine.h, so an operator can set a bad checkpoint aside (never resumed,
// exported or listed as "latest") and bring it back while its step number is still free.
#pragma once

namespace CLI {
class App;
}

namespace shardguard::cli {

// Registers both subcommands on the `ckpt` group; the one that runs stores its exit code in
// `*exit_code`.
void add_ckpt_quarantine_commands(CLI::App& ckpt, int* exit_code);

}  // namespace shardguard::cli
