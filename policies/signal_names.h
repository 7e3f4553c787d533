// Names of POSIX signals ("SIGKILL") both ways, for exit descriptions and config files.
// Pure functions over a fixed table; thread-safe.
#pragma once

#include <optional>
#include <string_view>

namespace shardguard::policies {

// "SIGKILL" for 9; empty for a number this table does not know (real-time signals).
std::string_view signal_name(int signal);
// 10 for "SIGUSR1" (exact, upper case, with the SIG prefix); nullopt when unknown.
std::optional<int> signal_number(std::string_view name);

}  // namespace shardguard::policies
