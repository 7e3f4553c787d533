// The control protocol between a training job's ranks and the local agent: one JSON object
// per line over a Unix socket (DESIGN.md section 4), versioned, strictly parsed.
//
//   job -> agent : hello, heartbeat{step}, checkpoint_begin{step},
//                  checkpoint_committed{step, manifest}, checkpoint_failed{step, error}
//   agent -> job : schedule{every_steps, every_ms}, checkpoint_now{deadline_unix_ms, reason,
//                  at_step}, stop{deadline_unix_ms}, error{message}
//
// Every line is {"v":1,"type":"...", ...fields}. Unknown types, missing fields, fields of
// the wrong type and unknown fields are errors (the agent answers with `error` and keeps
// serving). Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "core/result.h"

namespace shardguard::hooks {

inline constexpr int kProtocolVersion = 1;
inline constexpr size_t kMaxLineBytes = 64 * 1024;

// Job -> agent.
struct Hello {
  uint32_t rank = 0;
  uint32_t world_size = 1;
  int64_t pid = 0;
  std::string job_id;
  uint64_t attempt = 0;
};
struct Heartbeat {
  uint64_t step = 0;
};
struct CheckpointBegin {
  uint64_t step = 0;
};
struct CheckpointCommitted {
  uint64_t step = 0;
  std::string manifest;  // path of the committed manifest.json
};
struct CheckpointFailed {
  uint64_t step = 0;
  std::string error;
};
using JobMessage =
    std::variant<Hello, Heartbeat, CheckpointBegin, CheckpointCommitted, CheckpointFailed>;

// Agent -> job.
struct Schedule {
  uint64_t every_steps = 0;  // 0: off
  int64_t every_ms = 0;      // 0: off
};
struct CheckpointNow {
  int64_t deadline_unix_ms = 0;
  // "periodic" and "advisory:..." ask for a plain save; any other reason ("aws
  // spot-interruption", "sigterm", "drain", ...) is an emergency: save, then exit.
  std::string reason;
  uint64_t at_step = 0;  // checkpoint when the step counter reaches this
};
struct Stop {
  int64_t deadline_unix_ms = 0;
};
struct ErrorReply {
  std::string message;
};
using AgentMessage = std::variant<Schedule, CheckpointNow, Stop, ErrorReply>;

// One line, newline included.
std::string encode(const JobMessage& message);
std::string encode(const AgentMessage& message);

// Parses one line (with or without the newline). kInvalid names the problem.
Result<JobMessage> decode_job_message(std::string_view line);
Result<AgentMessage> decode_agent_message(std::string_view line);

std::string_view message_type(const JobMessage& message);
std::string_view message_type(const AgentMessage& message);

}  // namespace shardguard::hooks
