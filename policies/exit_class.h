// Why an attempt ended: the class picks the restart budget (DESIGN.md section 6). A notice
// or node health outranks the ranks' own exit codes, because a preempted or sick node makes
// ranks fail in arbitrary ways. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardguard::policies {

// kNoSpace: a save failed because the disk is full (its own budget; never a fresh start).
// kResumeFailed: a rank found the resume checkpoint corrupt (it is quarantined; the next attempt
// falls back to the previous one without burning the crash budget). kResize: the job was
// stopped on purpose to grow onto returning nodes (no budget). kDivergence: the divergence
// guard stopped the attempt to roll back past bad weights (its own count, [guard] rollbacks).
enum class ExitClass {
  kSuccess, kPreempted, kInfrastructure, kHang, kCrash, kNoProgress, kNoSpace, kResumeFailed,
  kResize, kDivergence
};

// "success", "preempted", "infrastructure", "hang", "crash", "no_progress", "no_space",
// "resume_failed", "resize", "divergence".
std::string_view exit_class_name(ExitClass c);

struct RankExit {
  uint32_t rank;
  bool signaled;  // true: killed by `signal`; false: exited with `code`
  int code;
  int signal;
};

struct ExitContext {
  std::vector<RankExit> exits;  // ranks that ended on their own, first one first
  bool notice_active = false;   // a preemption notice or emergency was in progress
  bool hang_detected = false;
  bool node_unhealthy = false;
  bool torn_down_by_us = false;  // the supervisor killed the ranks that had not ended
  bool node_lost = false;        // a node of the job stopped answering (multi-node)
  bool save_out_of_space = false;  // a save failed with ENOSPC in this attempt
  bool resume_failed = false;    // a rank reported the resume checkpoint corrupt
  bool resize = false;           // stopped on purpose to change the number of nodes
  bool diverged = false;         // the divergence guard stopped it
  std::vector<int> preemption_exit_codes;
};

// First rule that matches: node_unhealthy -> kInfrastructure; notice_active -> kPreempted;
// diverged -> kDivergence; resize -> kResize; resume_failed -> kResumeFailed; save_out_of_space -> kNoSpace;
// hang_detected -> kHang; node_lost -> kInfrastructure; a (non-signal) exit code listed in
// preemption_exit_codes -> kPreempted; at least one exit and all of them code 0 -> kSuccess;
// otherwise kCrash.
ExitClass classify_exit(const ExitContext& context);

// One line for logs and events: "rank 1 killed by signal 9 (SIGKILL)", "rank 0 exited with
// code 3"; names the first failing rank, counts the others, and appends the flags set
// ("; preemption notice active", "; node unhealthy", ...).
std::string describe_exit(const ExitContext& context);

}  // namespace shardguard::policies
