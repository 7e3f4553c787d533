// The vocabulary of the decision core (supervisor/attempt_machine.h): the events it is fed and
// the commands it answers with. The same types travel between the coordinator and the node
// supervisors (in process for one node, over the authenticated network plane for many), and
// the fleet simulator speaks them too, so what it predicts is what the product does.
//
// Ranks are global (node rank x nproc_per_node + local rank). A node is identified by a NodeId
// that stays the same while it is a member; its node rank is renumbered densely at each epoch.
// Every event about ranks carries the epoch it belongs to: events of an older epoch are
// recorded and otherwise ignored (a zombie cannot move the job).
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/clock.h"
#include "core/scalar_window.h"
#include "supervisor/event_fields.h"

namespace shardguard::supervisor {

using NodeId = uint32_t;
using Epoch = uint64_t;

// The time of an event: both clocks, so the core never reads one.
struct Now {
  SteadyTime steady{};
  WallTime wall{};
};

// What a checkpoint request is for. Emergency: save at_step, then exit (the job is stopping).
// Periodic and advisory: a plain save, the job goes on.
enum class CheckpointKind { kEmergency, kPeriodic, kAdvisory };
std::string_view checkpoint_kind_name(CheckpointKind kind);

// What a notice asks for: checkpoint then stop (preemption, drain, node unhealthy), or only an
// extra checkpoint (an advisory such as AWS rebalance).
enum class NoticeAction { kStop, kCheckpoint };

// The timers the core arms through commands. One of each at a time.
enum class TimerId {
  kBackoff,      // relaunch after the backoff delay
  kDeadline,     // the emergency checkpoint's time is up: tear down
  kDrain,        // ranks should have exited after the emergency commit
  kHealth,       // next hang / start-up check
  kPeriodic,     // next time-based checkpoint request
  kJoinWindow,   // enough nodes are here; wait this long for more before launching
  kRendezvous,   // below the minimum number of nodes for too long: give up (exit 75)
  kStopTimeout,  // a node did not confirm its ranks are gone after a teardown
  kRejoin,       // an adopted epoch's nodes had this long to come back to a new coordinator
};
inline constexpr int kTimerCount = 9;
std::string_view timer_name(TimerId id);

// One node's place in an epoch.
struct NodeSlot {
  NodeId node = 0;
  uint32_t node_rank = 0;
  uint32_t first_rank = 0;  // global rank of its local rank 0
  uint32_t nproc = 0;

  bool operator==(const NodeSlot&) const = default;
};

namespace event {

struct NodeJoined {
  NodeId node = 0;
  std::string address;  // MASTER_ADDR when this node hosts global rank 0
};
struct NodeLost {
  NodeId node = 0;
  std::string why;
};
// Answer to command::FindResume: the newest complete, verified checkpoint not skipped.
struct ResumeFound {
  Epoch epoch = 0;
  std::optional<uint64_t> step;  // nullopt: fresh start
  std::string manifest;
  // A complete checkpoint exists but was skipped (no progress from it): with no older one to
  // fall back to, a fresh start could never commit its step again.
  bool skipped_complete = false;
};
struct NodeLaunched {
  Epoch epoch = 0;
  NodeId node = 0;
};
struct LaunchFailed {
  Epoch epoch = 0;
  NodeId node = 0;
  std::string error;
  bool transient = false;  // e.g. EMFILE: worth a retry after a backoff
};
struct RankHello {
  Epoch epoch = 0;
  uint32_t rank = 0;
  int64_t pid = 0;
};
struct RankStep {
  uint32_t rank = 0;
  uint64_t step = 0;
  StepScalars scalars;  // loss / grad_norm since the rank's last heartbeat (divergence guard)
};
// Ranks that heartbeated since the last report, with their steps. `all_ranks_at` reports every
// rank of the epoch at one step in one event (the simulator's node-level form).
struct Heartbeats {
  Epoch epoch = 0;
  std::vector<RankStep> ranks;
  std::optional<uint64_t> all_ranks_at;
};
struct SaveBegan {
  Epoch epoch = 0;
  uint32_t rank = 0;
  uint64_t step = 0;
};
// A commit that was read back from the checkpoint directory and matched (never a claim).
struct Committed {
  Epoch epoch = 0;
  uint64_t step = 0;
  std::string manifest;
  uint64_t bytes = 0;
};
// A rank's shard and sidecar of `step` are durable (written and published): the committer
// learns that every rank's are from the supervisor (command::AllWritten), never by polling
// the checkpoint location (a bucket would be asked once per rank per poll).
struct ShardWritten {
  Epoch epoch = 0;
  uint32_t rank = 0;
  uint64_t step = 0;
};
struct SaveFailed {
  Epoch epoch = 0;
  uint32_t rank = 0;
  uint64_t step = 0;
  std::string error;
  bool no_space = false;
};
// A rank was already past the requested at_step when the request reached it.
struct Passed {
  Epoch epoch = 0;
  uint32_t rank = 0;
  uint64_t step = 0;
};
// A rank found the resume checkpoint corrupt (a block failed its checksum).
struct ResumeFailed {
  Epoch epoch = 0;
  uint32_t rank = 0;
  std::string manifest;
  std::string file;
  uint64_t offset = 0;
  std::string error;
};
struct RankExited {
  Epoch epoch = 0;
  uint32_t rank = 0;
  bool signaled = false;
  int code = 0;
  int signal = 0;
  bool during_teardown = false;  // it was still running when its node began the teardown
  std::string description;       // "exited with code 3", "killed by signal 9 (SIGKILL)"
};
// Every process of the node's ranks of `epoch` is gone.
struct NodeStopped {
  Epoch epoch = 0;
  NodeId node = 0;
};
struct Notice {
  NodeId node = 0;
  NoticeAction action = NoticeAction::kStop;
  std::string source;  // "aws", "gcp", "azure", "signal", "drain", "health", ...
  std::string kind;    // "spot-interruption", "sigterm", ...
  std::string detail;  // provider's words / operator's reason
  WallTime deadline{};
  uint64_t id = 0;         // to acknowledge (Azure StartRequests) once the checkpoint commits
  bool preemption = true;  // the machine goes away (vs an operator's stop)

  bool operator==(const Notice&) const = default;
};
struct NodeUnhealthy {
  NodeId node = 0;
  std::string evidence;
  WallTime deadline{};
};
struct TimerFired {
  TimerId id = TimerId::kBackoff;
};
// The job cannot go on here at all (the checkpoint directory was taken over by another run):
// tear down without saving and end with `exit_code`.
struct Abort {
  std::string why;
  int exit_code = 1;
};

}  // namespace event

using Event =
    std::variant<event::NodeJoined, event::NodeLost, event::ResumeFound, event::NodeLaunched,
                 event::LaunchFailed, event::RankHello, event::Heartbeats, event::SaveBegan,
                 event::ShardWritten, event::Committed, event::SaveFailed, event::Passed,
                 event::ResumeFailed,
                 event::RankExited, event::NodeStopped, event::Notice, event::NodeUnhealthy,
                 event::TimerFired, event::Abort>;

namespace command {

// Look for the newest complete checkpoint, skipping `skip_steps` and every step at or after
// `skip_from` (the divergence guard's suspect range: quarantined, but its checkpoints might
// not all be set aside yet); answer with ResumeFound.
struct FindResume {
  Epoch epoch = 0;
  std::vector<uint64_t> skip_steps;
  std::optional<uint64_t> skip_from;
};
struct Launch {
  Epoch epoch = 0;
  uint32_t world_size = 0;
  uint32_t nproc_per_node = 0;
  std::string master_addr;
  uint16_t master_port = 0;
  std::optional<uint64_t> resume_step;
  std::string resume_manifest;  // empty: fresh start
  std::vector<NodeSlot> nodes;
  // Data batches the ranks skip after the resume position (SHARDGUARD_SKIP_BATCHES): set on
  // relaunches from the checkpoint the divergence guard rolled back to.
  uint64_t skip_batches = 0;
};
// Every node: tell the ranks `stop`, kill what is left after the term grace, confirm with
// NodeStopped.
struct TearDown {
  Epoch epoch = 0;
  std::string why;
  // During an emergency: the notice's deadline. What is left of the ranks is killed by then
  // at the latest, even when the term grace would end later.
  std::optional<WallTime> kill_by{};
};
struct CheckpointNow {
  Epoch epoch = 0;
  uint64_t at_step = 0;
  WallTime deadline{};
  std::string reason;
  CheckpointKind kind = CheckpointKind::kEmergency;
};
// The commit of `step` will not happen (a rank's save failed): ranks waiting for it give up.
struct AbortSave {
  Epoch epoch = 0;
  uint64_t step = 0;
  std::string why;
};
// Every rank of `epoch` wrote its part of `step`: the committer (global rank 0) commits now.
struct AllWritten {
  Epoch epoch = 0;
  uint64_t step = 0;
};
// The commit of `step` was read back and matched: ranks waiting for it (an emergency save)
// go on.
struct SaveCommitted {
  Epoch epoch = 0;
  uint64_t step = 0;
  std::string manifest;
};
struct ArmTimer {
  TimerId id = TimerId::kBackoff;
  SteadyTime at{};
};
struct CancelTimer {
  TimerId id = TimerId::kBackoff;
};
// A line for the job's timeline (events.jsonl).
struct Record {
  std::string type;
  EventFields fields;
};
// A lifecycle event for the job's [[hooks]].
struct Hook {
  std::string event;
  std::map<std::string, std::string> fields;
};
struct AckNotice {
  uint64_t notice_id = 0;
};
// Set the checkpoint of `step` aside so that nothing resumes from it again.
struct Quarantine {
  uint64_t step = 0;
  std::string manifest;
  std::string reason;
};
// A node that leaves an elastic job for good (a stop notice on it, a drain, a failed health
// check) while the others go on: its `shardguard run` exits (75: it was stopped by a notice).
struct Release {
  NodeId node = 0;
  std::string why;
};
// Set aside every checkpoint of step `from_step` or later (the divergence guard's rollback).
struct QuarantineFrom {
  uint64_t from_step = 0;
  std::string reason;
};
// Collect what the rank's processes are doing (off the loop thread).
struct CollectHangReport {
  Epoch epoch = 0;
  uint32_t rank = 0;
};
enum class FinalState { kSucceeded, kFailed, kPreempted };
std::string_view final_state_name(FinalState state);
struct Finish {
  FinalState state = FinalState::kSucceeded;
  int exit_code = 0;
  std::string summary;
};

}  // namespace command

using Command =
    std::variant<command::FindResume, command::Launch, command::TearDown, command::CheckpointNow,
                 command::AbortSave, command::AllWritten, command::SaveCommitted,
                 command::ArmTimer, command::CancelTimer, command::Record,
                 command::Hook, command::AckNotice, command::Release, command::Quarantine,
                 command::QuarantineFrom, command::CollectHangReport, command::Finish>;
using Commands = std::vector<Command>;

// The name of an event or command, for logs and tests ("rank_exited", "launch", ...).
std::string_view event_name(const Event& event);
std::string_view command_name(const Command& command);

}  // namespace shardguard::supervisor
