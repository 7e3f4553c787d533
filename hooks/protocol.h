// The control protocol between a training job's ranks and the local agent: one JSON object
// per line over a Unix socket (DESIGN.md section 4), versioned, strictly parsed.
//
//   job -> agent : hello, heartbeat{step, scalars?}, checkpoint_begin{step},
//                  checkpoint_written{step}, checkpoint_committed{step, manifest},
//                  checkpoint_failed{step, error}, passed{step},
//                  resume_failed{manifest, file, offset, error}, signal{name},
//                  progress{phase, step, done, total}
//   agent -> job : schedule{every_steps, every_ms}, checkpoint_now{deadline_unix_ms, kind,
//                  reason, at_step}, abort_save{step, reason}, all_written{step},
//                  committed{step, manifest}, stop{deadline_unix_ms}, error{message}
//
// A save's progress travels here, not through the checkpoint location: each rank says when
// its part is durable (checkpoint_written), the supervisor tells the committer once every
// rank's is (all_written), and tells everyone once the commit was read back (committed). So
// no rank polls a bucket for another's files.
//
// Every line is {"v":2,"type":"...", ...fields}. Unknown types, missing fields, fields of
// the wrong type, unknown fields and repeated keys are errors (the agent answers with `error`
// and keeps serving). Version 2 made the kind of a checkpoint request a typed field (version 1
// encoded it in the reason) and added passed, resume_failed and abort_save; `signal` joined
// it later (an agent that predates it answers `error`, and the client keeps training), and so
// did a heartbeat's optional `scalars` (the loss and gradient norm of the steps since the last
// heartbeat, for the divergence guard):
//   "scalars":{"loss":{"from":S0,"to":S1,"n":N,"last":X,"min":X,"max":X,"nonfinite_at":S}}
// with "nonfinite_at" present only when a step of the window had a NaN or an infinity, and
// last/min/max finite numbers (0 when n is 0).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "core/result.h"
#include "core/scalar_window.h"

namespace shardguard::hooks {

inline constexpr int kProtocolVersion = 2;
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
  StepScalars scalars;  // empty: the job reports none
};
struct CheckpointBegin {
  uint64_t step = 0;
};
// This rank's shard and sidecar of `step` are durable and published.
struct CheckpointWritten {
  uint64_t step = 0;
};
struct CheckpointCommitted {
  uint64_t step = 0;
  std::string manifest;  // path of the committed manifest.json
};
struct CheckpointFailed {
  uint64_t step = 0;
  std::string error;
  bool no_space = false;  // the disk is full (ENOSPC, EDQUOT)
};
// This rank was already past the requested at_step when the request arrived: the supervisor
// picks a new at_step for every rank (clients never choose one themselves).
struct Passed {
  uint64_t step = 0;
};
// The resume checkpoint failed verification: the supervisor sets it aside and falls back.
struct ResumeFailed {
  std::string manifest;
  std::string file;  // relative to the step directory
  uint64_t offset = 0;
  std::string error;
};
// A signal that means "the job is being stopped" (SIGTERM) reached this rank from outside:
// Slurm signals every process of a job on scancel, a time limit, preemption or requeue,
// and shardguard itself never sends it to ranks. The supervisor treats it as the notice its
// own SIGTERM would be. `name` is "SIGTERM" or "SIGINT".
struct SignalReceived {
  std::string name;
};
// A long transfer's progress (a save's writes, a resume's reads), every second or so while it
// runs: bytes done of `total` (a resume's total is this rank's share, estimated).
enum class TransferPhase { kSave, kResume };
std::string_view transfer_phase_name(TransferPhase phase);  // "save", "resume"
struct Progress {
  TransferPhase phase = TransferPhase::kSave;
  uint64_t step = 0;
  uint64_t done = 0;
  uint64_t total = 0;
};
using JobMessage = std::variant<Hello, Heartbeat, CheckpointBegin, CheckpointWritten,
                                CheckpointCommitted, CheckpointFailed, Passed, ResumeFailed,
                                SignalReceived, Progress>;

// Agent -> job.
struct Schedule {
  uint64_t every_steps = 0;  // 0: off
  int64_t every_ms = 0;      // 0: off
};
// Emergency: save at_step, then exit (the job is stopping). Periodic and advisory: a plain
// save; training goes on.
enum class RequestKind { kEmergency, kPeriodic, kAdvisory };
std::string_view request_kind_name(RequestKind kind);  // "emergency", "periodic", "advisory"

struct CheckpointNow {
  int64_t deadline_unix_ms = 0;
  RequestKind kind = RequestKind::kEmergency;
  std::string reason;    // for logs: "aws-spot-interruption", "sigterm", "periodic", ...
  uint64_t at_step = 0;  // checkpoint when the step counter reaches this
};
// The commit of `step` will not happen (another rank's save failed): stop waiting for it.
struct AbortSave {
  uint64_t step = 0;
  std::string reason;
};
// Every rank wrote its part of `step`: the committer (rank 0) commits now.
struct AllWritten {
  uint64_t step = 0;
};
// The commit of `step` was read back by the supervisor: a rank waiting for it goes on.
struct Committed {
  uint64_t step = 0;
  std::string manifest;
};
// Exit now, saving nothing (the supervisor is tearing the ranks down).
struct Stop {
  int64_t deadline_unix_ms = 0;
};
struct ErrorReply {
  std::string message;
};
using AgentMessage =
    std::variant<Schedule, CheckpointNow, AbortSave, AllWritten, Committed, Stop, ErrorReply>;

// One line, newline included.
std::string encode(const JobMessage& message);
std::string encode(const AgentMessage& message);

// Parses one line (with or without the newline). kInvalid names the problem.
Result<JobMessage> decode_job_message(std::string_view line);
Result<AgentMessage> decode_agent_message(std::string_view line);

std::string_view message_type(const JobMessage& message);
std::string_view message_type(const AgentMessage& message);

}  // namespace shardguard::hooks
