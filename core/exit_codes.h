// Every exit code shardguard gives a meaning to, in one table (documented in the README).
// `shardguard run` exits with the job's own code on success or final failure, and with these
// for its own reasons; the job-side clients exit with the kJob* codes.
#pragma once

namespace shardguard {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;        // a command failed (the message says why)
inline constexpr int kExitUsage = 2;          // bad flags or a config error
inline constexpr int kExitCheckpointBad = 3;  // `ckpt verify`: incomplete or corrupt
// `run`: stopped by a notice (after the emergency checkpoint when it could be taken).
// EX_TEMPFAIL: "requeue me". Jobs exit with it after an emergency checkpoint too.
inline constexpr int kExitPreempted = 75;
inline constexpr int kExitGaveUp = 76;        // `run`: a restart budget is spent: do not requeue
// `run`: requeueing will not help (the checkpoint directory is held by another job, the disk
// can never hold one checkpoint, or the last runs each exited 75 without committing): EX_CONFIG.
inline constexpr int kExitConfig = 78;

// A rank whose resume checkpoint fails verification exits with this (EX_IOERR) after telling
// the supervisor which file and offset; the supervisor quarantines that checkpoint.
inline constexpr int kJobExitResumeFailed = 74;
inline constexpr int kJobExitAfterEmergency = kExitPreempted;

}  // namespace shardguard
