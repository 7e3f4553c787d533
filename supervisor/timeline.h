// The run's timeline understood: the records of <run_dir>/events.jsonl (one or more
// `shardguard run`s in one run dir, appended) in; what an on-call engineer and the metrics need
// out: the state, the step and its rate, the last committed checkpoint, lost steps, restarts
// used and left per class, notices, the attempts, evidence, and goodput with badput by cause
// (policies/goodput.h). `shardguard status`, `shardguard report` and the shell's Prometheus text
// all read it, so they cannot disagree.
//
// Goodput from the timeline (DESIGN.md section 6, issue 14). Allocated GPUs are the attempt's
// world size (the `launch` record's nproc; before the first launch the `start` record's nproc);
// between runs (after `finish`, or after the last record of a run that ended without one)
// nothing is allocated. Each allocated second is one of:
//   training    from `ranks_ready` to `teardown`; it ends earlier at a hang (the rank's last
//               heartbeat, `hang` time - seconds_since_heartbeat, or the last commit if that
//               came later) and at the commit of an emergency checkpoint (the ranks only exit
//               after it)
//   checkpoint  the save stalls inside training: each `checkpoint_committed` record's seconds
//               (begin -> commit; exact for synchronous saves, an overestimate for async ones,
//               whose stall is only the snapshot: the record does not say which it was)
//   restart     the rest of an attempt's life and the gaps between attempts: launch ->
//               ranks_ready, teardown -> attempt_end -> backoff -> next launch, start -> launch
//   waiting     pending: from `start` until a node joined, and while no node is left
// and at each `attempt_end` its lost_steps x the attempt's mean step time (training seconds /
// steps run) move from productive to recompute (GoodputAccumulator::lose).
//
// Pure: records in, values out; no I/O, no clock (time is an argument). Robust to hand-edited
// files: a malformed line is skipped and counted, a field that does not parse is ignored.
// Thread-safety: none; one Timeline per reader (the shell feeds it from its loop thread).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policies/goodput.h"
#include "policies/restart_policy.h"
#include "supervisor/event_fields.h"

namespace shardguard::supervisor {

// One line of events.jsonl: {"time_unix_ms":..., "event":..., fields...}.
struct TimelineRecord {
  int64_t time_unix_ms = 0;
  std::string type;
  EventFields fields;

  const EventValue* find(std::string_view key) const;
  // A finite number (a JSON number, or a string holding one); nullopt when absent or unparsable.
  std::optional<double> number(std::string_view key) const;
  // A non-negative integer; nullopt when absent, negative, fractional or unparsable.
  std::optional<uint64_t> count(std::string_view key) const;
  std::optional<bool> flag(std::string_view key) const;
  // Strings as they are, numbers and booleans written out; "" when absent. Unescaped: pass it
  // through escape_for_terminal() before showing it.
  std::string text(std::string_view key) const;
};

// Parses one events.jsonl line; nullopt unless it is a JSON object with an integer
// "time_unix_ms" and a string "event". Arrays, objects and null fields are kept as JSON text.
std::optional<TimelineRecord> parse_timeline_line(std::string_view line);

// [restart.<class>] budgets of the job config, by exit class name ("crash", "hang", ...).
using RestartBudgets = std::map<std::string, policies::Budget>;

struct AttemptView {
  uint64_t attempt = 0;
  size_t run = 0;  // index into TimelineView::runs
  uint32_t nproc = 0;
  std::optional<uint64_t> resume_step;  // nullopt: fresh start
  int64_t launch_unix_ms = 0;
  std::optional<int64_t> ready_unix_ms, teardown_unix_ms, end_unix_ms;
  std::string teardown_why;
  std::string end_class, end_detail;  // of attempt_end; empty while it runs
  uint64_t max_step = 0;
  uint64_t lost_steps = 0;
  double lost_seconds = 0;  // lost_steps x mean step time (wall seconds, not GPU-seconds)
  double training_seconds = 0;
  double checkpoint_seconds = 0;  // save stalls
  uint64_t checkpoints = 0;
  std::optional<uint64_t> emergency_at_step;  // an emergency checkpoint was requested
  std::optional<double> backoff_seconds;      // the restart that followed
  std::string restart_reason;
  std::string gave_up;                     // why, when the run gave up after this attempt
  std::optional<double> steps_per_second;  // while training, stalls excluded
};

struct RunView {
  int64_t start_unix_ms = 0;
  std::optional<int64_t> finish_unix_ms;
  int64_t last_unix_ms = 0;  // last record of this run
  std::string job_id;
  uint32_t nproc = 0;
  std::string final_state;  // "succeeded", "failed", "preempted"; empty while it runs
  std::optional<int64_t> exit_code;
  std::string summary;
};

struct NoticeView {
  int64_t time_unix_ms = 0;
  std::string source, kind, reason, action;  // action: "stop" | "checkpoint"
  bool preemption = false;
  bool shortened = false;  // a `deadline_shortened` record: a later notice with an earlier deadline
  std::optional<double> seconds_left;  // at the notice
};

struct CheckpointView {
  uint64_t step = 0;
  int64_t time_unix_ms = 0;
  uint64_t attempt = 0;
  double seconds = 0;  // begin -> commit
  std::string manifest;
  bool emergency = false;
  std::optional<uint64_t> bytes;  // when the record says
};

// A long save or resume in progress, from its latest `transfer_progress` record (gone once
// that step commits or fails, or its attempt ends).
struct TransferView {
  std::string phase;  // "save" or "resume"
  uint64_t step = 0;
  uint64_t done_bytes = 0;
  uint64_t total_bytes = 0;
  double bytes_per_second = 0;
  std::optional<double> seconds_left;
  int64_t time_unix_ms = 0;
};

// One node of a multi-node job, as the coordinator's records tell it.
struct NodeView {
  uint64_t node = 0;
  std::string address;
  // "running" (placed in the running attempt), "waiting" (a member, not placed: it joined
  // after the launch, or the job is between attempts), "lost", "unhealthy", "notified" (a stop
  // notice on that node), "left" (released after its notice, the job went on without it),
  // "stopped" (the run ended).
  std::string state;
  std::optional<uint64_t> attempt;    // the latest attempt it was placed in
  std::optional<uint32_t> node_rank;  // its node rank there
  int64_t since_unix_ms = 0;          // in this state since
  std::string why;                    // lost / unhealthy / notified: the records' words
};

struct RestartCount {
  std::string exit_class;
  uint32_t used = 0;            // in the latest run (budgets live in one `shardguard run`)
  uint32_t used_total = 0;      // over every run in the run dir
  std::optional<uint32_t> max;  // from the budget, when known
  std::optional<double> window_seconds;
  std::optional<uint32_t> left;  // max - restarts within the window ending now
};

struct TimelineView {
  std::string state;  // pending, launching, running, checkpointing, draining, stopping, backoff,
                      // succeeded, failed, preempted; "empty" without records
  bool finished = false;            // the latest run recorded `finish`
  std::optional<uint64_t> attempt;  // the latest
  uint32_t nproc = 0;               // of the latest attempt
  std::optional<uint64_t> step;     // best known step of the latest attempt
  std::string step_source;          // "checkpoint", "attempt end", "hang", "resume"
  std::optional<double> steps_per_second;
  std::optional<CheckpointView> last_checkpoint;
  std::optional<TransferView> transfer;  // a save or resume in progress
  uint64_t checkpoints = 0;
  uint64_t lost_steps = 0;
  std::vector<RestartCount> restarts;
  std::vector<NoticeView> notices;
  std::vector<AttemptView> attempts;
  std::vector<RunView> runs;
  std::vector<NodeView> nodes;  // by node id; every node any record named
  // Records worth showing as evidence: hang, hang_report, node_unhealthy, node_lost,
  // launch_failed, checkpoint_failed, resume_failed, resume_skipped, quarantined,
  // quarantine_failed, give_up, stale_commit, commit_claim_rejected, implausible_step,
  // divergence, guard_rollback, guard_recovered.
  std::vector<TimelineRecord> evidence;
  policies::GoodputTotals goodput;
  int64_t first_unix_ms = 0, last_unix_ms = 0;
  uint64_t records = 0;
  uint64_t skipped_lines = 0;
};

struct TimelineOptions {
  RestartBudgets budgets;
  // Keep every record for records(): the CLI shows them; a long-lived shell need not.
  bool keep_records = true;
};

class Timeline {
 public:
  explicit Timeline(TimelineOptions options = {});
  ~Timeline();
  Timeline(Timeline&&) noexcept;
  Timeline& operator=(Timeline&&) noexcept;

  // Feeds one record, in file order (the shell: each record as it writes it).
  void add(const TimelineRecord& record);
  void add(int64_t time_unix_ms, std::string_view type, const EventFields& fields);
  // Parses and feeds one line of events.jsonl; a malformed line is counted and skipped
  // (returns false). Blank lines are ignored.
  bool add_line(std::string_view line);
  // Feeds every line of a whole events.jsonl text (the shell, at start: earlier runs count).
  void add_lines(std::string_view text);

  // Everything at `now_unix_ms`: a run that has not recorded `finish` counts its current phase
  // up to then (pass the last record's time for a run whose supervisor is gone).
  TimelineView view(int64_t now_unix_ms) const;
  // Only the goodput of view(now_unix_ms), cheaply (for the metrics endpoint).
  policies::GoodputTotals goodput(int64_t now_unix_ms) const;
  const std::vector<TimelineRecord>& records() const;
  uint64_t skipped_lines() const;
  std::optional<int64_t> last_unix_ms() const;  // nullopt: nothing yet

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Prometheus text exposition of `totals`:
//   shardguard_goodput_ratio                  productive / allocated GPU-seconds (gauge)
//   shardguard_allocated_gpu_seconds_total    (counter)
//   shardguard_productive_gpu_seconds         (gauge: a lost step moves out of it)
//   shardguard_badput_seconds_total{cause=..} GPU-seconds by cause (counter)
// Numbers are written in fixed notation, never with an exponent.
std::string goodput_metrics(const policies::GoodputTotals& totals);

}  // namespace shardguard::supervisor
