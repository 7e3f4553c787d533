// Exit codes of the `shardguard` binary, documented in the README. `shardguard run` exits
// with the job's own code on success or final failure, and with these for its own reasons.
#pragma once

namespace shardguard {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;      // a command failed (the message says why)
inline constexpr int kExitUsage = 2;        // bad flags or a config error
inline constexpr int kExitCheckpointBad = 3;  // `ckpt verify`: incomplete or corrupt
inline constexpr int kExitPreempted = 75;   // `run`: stopped by a notice after saving
                                            // (EX_TEMPFAIL: requeue me)
inline constexpr int kExitGaveUp = 76;      // `run`: restart budget spent, gave up

}  // namespace shardguard
