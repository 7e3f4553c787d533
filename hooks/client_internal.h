// Internal to hooks/: pieces of the client shared between its .cc files.
#pragma once

#include <string_view>

#include "core/result.h"
#include "hooks/client.h"

namespace shardguard::hooks {

// SHARDGUARD_* variables over `defaults`.
Result<ClientOptions> options_from_env(ClientOptions defaults);
// "SIGUSR1" or "USR1" -> SIGUSR1; "none" -> 0.
Result<int> parse_signal_name(std::string_view name);

}  // namespace shardguard::hooks
