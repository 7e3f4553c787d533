// Internal to the timeline model (supervisor/timeline.h): its state, shared by timeline.cc
// (the records fed in, one handler per kind) and timeline_view.cc (the figures at `now`).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "supervisor/timeline.h"

namespace shardguard::supervisor::timeline_detail {

// What the allocated GPUs are doing since `since`. kLaunching: from `launch` until the ranks
// are ready - restart time, unless the attempt never reports ready and yet shows it trained
// (it committed a checkpoint, or ended in success): a job that does not heartbeat trains from
// its launch. Its seconds wait in the attempt until attempt_end decides.
enum class Spend { kNone, kWaiting, kLaunching, kTraining, kRestart };

// Evidence and notices are bounded so a shell that runs for weeks stays small.
constexpr size_t kMaxKept = 500;

inline bool is_evidence(std::string_view type) {
  for (std::string_view t :
       {"hang", "hang_report", "node_unhealthy", "node_lost", "launch_failed", "checkpoint_failed",
        "resume_failed", "resume_skipped", "quarantined", "quarantine_failed", "give_up",
        "stale_commit", "commit_claim_rejected", "implausible_step", "divergence",
        "guard_rollback", "guard_recovered"})
    if (type == t) return true;
  return false;
}

template <typename T>
inline void push_bounded(std::vector<T>& v, T item) {
  if (v.size() >= kMaxKept) v.erase(v.begin());
  v.push_back(std::move(item));
}

// The budget an exit class spends (policies/restart_policy.h: no_progress uses crash's).
inline std::string budget_class(const std::string& cls) {
  return cls == "no_progress" ? "crash" : cls;
}

inline double seconds_between(int64_t from_ms, int64_t to_ms) {
  return to_ms > from_ms ? double(to_ms - from_ms) / 1000.0 : 0.0;
}

struct RestartEvent {
  int64_t time_unix_ms;
  std::string exit_class;
  size_t run;
};

}  // namespace shardguard::supervisor::timeline_detail

namespace shardguard::supervisor {

struct Timeline::State {
  using Spend = timeline_detail::Spend;
  TimelineOptions opt;
  std::vector<TimelineRecord> records;
  uint64_t record_count = 0, skipped = 0;
  std::optional<int64_t> first_ms, last_ms;

  std::vector<RunView> runs;
  bool run_open = false;  // runs.back() has not recorded finish
  std::vector<AttemptView> attempts;
  bool attempt_open = false;  // attempts.back() has not recorded attempt_end
  bool attempt_ready = false;
  double pending_seconds = 0, pending_stall = 0;  // kLaunching time of the open attempt
  double train_at_commit = 0;
  std::optional<uint64_t> step_at_commit;
  std::vector<NoticeView> notices;
  std::map<uint64_t, NodeView> nodes;
  std::vector<TimelineRecord> evidence;
  std::optional<CheckpointView> last_checkpoint;
  std::optional<TransferView> transfer;
  uint64_t checkpoints = 0, lost_steps = 0;
  std::vector<timeline_detail::RestartEvent> restarts;
  bool shrink_pending = false;
  std::string state = "empty";
  std::optional<uint64_t> step;
  std::string step_source;

  policies::GoodputAccumulator acc;
  Spend spend = Spend::kNone;
  int64_t since = 0;
  uint32_t gpus = 0;

  // The open attempt, unless `r` names another (a zombie's or an older record).
  AttemptView* open_attempt(const TimelineRecord& r);
  // Accounts [since, at) to the current spend, then spends `next` from `at`.
  void switch_to(int64_t at, Spend next);
  // The launch -> ready time of the open attempt: training or restart, now that it is known.
  void resolve_pending(bool trained);
  void open_run(const TimelineRecord& r, uint32_t nproc);
  // A run that ends without `finish` (its supervisor was killed) ends at its last record.
  void close_run(int64_t at);
  void note_step(uint64_t s, const char* source);
  void on_start(const TimelineRecord& r);
  void on_launch(const TimelineRecord& r);
  // An attempt whose end was never recorded (its supervisor was killed, or a hand-edited
  // file): it ends at `at`, its pace known up to its last commit.
  void close_attempt_without_end(int64_t at, Spend next);
  // Steps per training second of the open attempt up to its last commit.
  std::optional<double> commit_pace(const AttemptView& a) const;
  void on_ranks_ready(const TimelineRecord& r);
  void on_committed(const TimelineRecord& r);
  void on_hang(const TimelineRecord& r);
  void on_teardown(const TimelineRecord& r);
  void on_attempt_end(const TimelineRecord& r);
  void on_backoff(const TimelineRecord& r);
  void on_finish(const TimelineRecord& r);
  void on_notice(const TimelineRecord& r, bool shortened);
  // timeline_nodes.cc: node_joined, node_lost, node_unhealthy, a node's notice, launch, finish.
  void on_node_record(const TimelineRecord& r);
  void feed(const TimelineRecord& r);

  // timeline_view.cc
  std::vector<RestartCount> restart_counts(int64_t now) const;
  // The accumulator with the phase still open at `now` counted.
  policies::GoodputTotals totals_at(int64_t now) const;
};

}  // namespace shardguard::supervisor
