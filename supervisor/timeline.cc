// The timeline model: one pass over the records, in file order, keeping the figures of
// supervisor/timeline.h up to date. Goodput is accounted at each change of what the allocated
// GPUs were doing (`Spend`); view() adds the phase still open at `now`.
#include "supervisor/timeline.h"

#include <algorithm>

#include "supervisor/timeline_text.h"

namespace shardguard::supervisor {
namespace {

// What the allocated GPUs are doing since `since`. kLaunching: from `launch` until the ranks
// are ready - restart time, unless the attempt never reports ready and yet shows it trained
// (it committed a checkpoint, or ended in success): a job that does not heartbeat trains from
// its launch. Its seconds wait in the attempt until attempt_end decides.
enum class Spend { kNone, kWaiting, kLaunching, kTraining, kRestart };

// Evidence and notices are bounded so a shell that runs for weeks stays small.
constexpr size_t kMaxKept = 500;

bool is_evidence(std::string_view type) {
  for (std::string_view t :
       {"hang", "hang_report", "node_unhealthy", "node_lost", "launch_failed", "checkpoint_failed",
        "resume_failed", "resume_skipped", "quarantined", "quarantine_failed", "give_up",
        "stale_commit", "commit_claim_rejected", "implausible_step"})
    if (type == t) return true;
  return false;
}

template <typename T>
void push_bounded(std::vector<T>& v, T item) {
  if (v.size() >= kMaxKept) v.erase(v.begin());
  v.push_back(std::move(item));
}

// The budget an exit class spends (policies/restart_policy.h: no_progress uses crash's).
std::string budget_class(const std::string& cls) { return cls == "no_progress" ? "crash" : cls; }

double seconds_between(int64_t from_ms, int64_t to_ms) {
  return to_ms > from_ms ? double(to_ms - from_ms) / 1000.0 : 0.0;
}

struct RestartEvent {
  int64_t time_unix_ms;
  std::string exit_class;
  size_t run;
};

}  // namespace

struct Timeline::State {
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
  std::vector<TimelineRecord> evidence;
  std::optional<CheckpointView> last_checkpoint;
  uint64_t checkpoints = 0, lost_steps = 0;
  std::vector<RestartEvent> restarts;
  bool shrink_pending = false;
  std::string state = "empty";
  std::optional<uint64_t> step;
  std::string step_source;

  policies::GoodputAccumulator acc;
  Spend spend = Spend::kNone;
  int64_t since = 0;
  uint32_t gpus = 0;

  AttemptView* open_attempt(const TimelineRecord& r) {
    if (!attempt_open) return nullptr;
    const auto a = r.count("attempt");
    if (a && *a != attempts.back().attempt) return nullptr;  // a zombie's or older record
    return &attempts.back();
  }

  // Accounts [since, at) to the current spend, then spends `next` from `at`.
  void switch_to(int64_t at, Spend next) {
    at = std::max(at, since);
    const double secs = seconds_between(since, at);
    switch (spend) {
      case Spend::kNone: break;
      case Spend::kWaiting: acc.badput(policies::Badput::kWaiting, secs, gpus); break;
      case Spend::kRestart: acc.badput(policies::Badput::kRestart, secs, gpus); break;
      case Spend::kLaunching: pending_seconds += secs; break;
      case Spend::kTraining:
        acc.training(secs, gpus);
        if (attempt_open) attempts.back().training_seconds += secs;
        break;
    }
    since = at;
    spend = next;
  }

  // The launch -> ready time of the open attempt: training or restart, now that it is known.
  void resolve_pending(bool trained) {
    if (trained) {
      acc.training(pending_seconds, gpus);
      acc.badput(policies::Badput::kCheckpoint, pending_stall, gpus);
      if (attempt_open) {
        attempts.back().training_seconds += pending_seconds;
        attempts.back().checkpoint_seconds += pending_stall;
      }
    } else {
      acc.badput(policies::Badput::kRestart, pending_seconds + pending_stall, gpus);
    }
    pending_seconds = pending_stall = 0;
  }

  void open_run(const TimelineRecord& r, uint32_t nproc) {
    close_run(runs.empty() ? r.time_unix_ms : runs.back().last_unix_ms);
    RunView run;
    run.start_unix_ms = run.last_unix_ms = r.time_unix_ms;
    run.nproc = nproc;
    runs.push_back(std::move(run));
    run_open = true;
    since = r.time_unix_ms;
    gpus = nproc;
  }

  // A run that ends without `finish` (its supervisor was killed) ends at its last record.
  void close_run(int64_t at) {
    if (!run_open) return;
    if (attempt_open) {
      close_attempt_without_end(at, Spend::kNone);
      attempts.back().end_detail = "the supervisor stopped without recording the end of this attempt";
    }
    switch_to(at, Spend::kNone);
    gpus = 0;
    run_open = false;
  }

  void note_step(uint64_t s, const char* source) {
    step = s;
    step_source = source;
  }

  void on_start(const TimelineRecord& r) {
    open_run(r, static_cast<uint32_t>(std::min<uint64_t>(r.count("nproc").value_or(0), UINT32_MAX)));
    runs.back().job_id = r.text("job_id");
    state = "pending";
    switch_to(r.time_unix_ms, Spend::kWaiting);
  }

  void on_launch(const TimelineRecord& r) {
    const uint32_t nproc =
        static_cast<uint32_t>(std::min<uint64_t>(r.count("nproc").value_or(0), UINT32_MAX));
    if (!run_open) open_run(r, nproc);
    if (attempt_open) close_attempt_without_end(r.time_unix_ms, Spend::kRestart);
    switch_to(r.time_unix_ms, Spend::kLaunching);
    if (nproc != 0) gpus = nproc;
    AttemptView a;
    a.attempt = r.count("attempt").value_or(attempts.empty() ? 0 : attempts.back().attempt + 1);
    a.run = runs.size() - 1;
    a.nproc = gpus;
    // resume_step is -1 on a fresh start.
    a.resume_step = r.count("resume_step");
    a.launch_unix_ms = r.time_unix_ms;
    attempts.push_back(std::move(a));
    attempt_open = true;
    attempt_ready = false;
    pending_seconds = pending_stall = 0;
    train_at_commit = 0;
    step_at_commit.reset();
    note_step(attempts.back().resume_step.value_or(0), "resume");
    state = "launching";
  }

  // An attempt whose end was never recorded (its supervisor was killed, or a hand-edited
  // file): it ends at `at`, its pace known up to its last commit.
  void close_attempt_without_end(int64_t at, Spend next) {
    switch_to(at, next);
    resolve_pending(false);
    AttemptView& a = attempts.back();
    a.end_unix_ms = at;
    a.end_class = "unknown";
    a.steps_per_second = commit_pace(a);
    attempt_open = false;
  }

  // Steps per training second of the open attempt up to its last commit.
  std::optional<double> commit_pace(const AttemptView& a) const {
    const uint64_t base = a.resume_step.value_or(0);
    if (!step_at_commit || *step_at_commit <= base || train_at_commit <= 0) return std::nullopt;
    return double(*step_at_commit - base) / train_at_commit;
  }

  void on_ranks_ready(const TimelineRecord& r) {
    AttemptView* a = open_attempt(r);
    if (a == nullptr || attempt_ready) return;
    switch_to(r.time_unix_ms, Spend::kTraining);
    resolve_pending(false);
    attempt_ready = true;
    a->ready_unix_ms = r.time_unix_ms;
    state = "running";
  }

  void on_committed(const TimelineRecord& r) {
    const auto step_committed = r.count("step");
    if (!step_committed) return;  // a hand-edited line: nothing to say about which step
    CheckpointView c;
    c.step = *step_committed;
    c.time_unix_ms = r.time_unix_ms;
    c.attempt = r.count("attempt").value_or(0);
    c.seconds = std::max(0.0, r.number("seconds").value_or(0));
    c.manifest = r.text("manifest");
    c.bytes = r.count("bytes");
    ++checkpoints;
    AttemptView* a = open_attempt(r);
    if (a != nullptr) {
      ++a->checkpoints;
      c.emergency = a->emergency_at_step && c.step >= *a->emergency_at_step;
      if (spend == Spend::kTraining || spend == Spend::kLaunching) {
        // The loop stalled for the save inside the time that would count as training.
        const double span = seconds_between(since, r.time_unix_ms);
        const double stall = std::min(c.seconds, span);
        if (spend == Spend::kTraining) {
          acc.training(span - stall, gpus);
          a->training_seconds += span - stall;
          acc.badput(policies::Badput::kCheckpoint, stall, gpus);
          a->checkpoint_seconds += stall;
        } else {
          pending_seconds += span - stall;
          pending_stall += stall;
        }
        since = std::max(since, r.time_unix_ms);
      }
      train_at_commit = a->training_seconds;
      step_at_commit = c.step;
      if (!step || c.step >= *step) note_step(c.step, "checkpoint");
      if (c.emergency) {
        // The ranks exit after an emergency save: what follows is stopping.
        if (spend == Spend::kTraining || spend == Spend::kLaunching)
          switch_to(r.time_unix_ms, Spend::kRestart);
        state = "draining";
      }
    }
    last_checkpoint = std::move(c);
  }

  void on_hang(const TimelineRecord& r) {
    AttemptView* a = open_attempt(r);
    if (a == nullptr) return;
    if (auto s = r.count("step"); s && (!step || *s >= *step)) note_step(*s, "hang");
    const double quiet = std::max(0.0, r.number("seconds_since_heartbeat").value_or(0));
    if (spend == Spend::kTraining) {
      // Nothing was computed since the rank's last heartbeat.
      switch_to(std::max(since, r.time_unix_ms - static_cast<int64_t>(quiet * 1000.0)),
                Spend::kRestart);
    } else if (spend == Spend::kLaunching) {
      switch_to(r.time_unix_ms, Spend::kRestart);
      resolve_pending(false);
    }
  }

  void on_teardown(const TimelineRecord& r) {
    AttemptView* a = open_attempt(r);
    if (a != nullptr) {
      a->teardown_unix_ms = r.time_unix_ms;
      a->teardown_why = r.text("why");
    }
    // The launch -> teardown time of an attempt that never reported ready stays pending
    // until attempt_end says whether it trained.
    if (spend != Spend::kNone) switch_to(r.time_unix_ms, Spend::kRestart);
    state = "stopping";
  }

  void on_attempt_end(const TimelineRecord& r) {
    AttemptView* a = open_attempt(r);
    if (a == nullptr) return;
    switch_to(r.time_unix_ms, Spend::kRestart);
    a->end_unix_ms = r.time_unix_ms;
    a->end_class = r.text("class");
    a->end_detail = r.text("detail");
    a->max_step = std::max(a->max_step, r.count("max_step").value_or(0));
    a->lost_steps = r.count("lost_steps").value_or(0);
    if (!attempt_ready) resolve_pending(a->end_class == "success" || a->checkpoints > 0);
    const uint64_t base = a->resume_step.value_or(0);
    const uint64_t ran = a->max_step > base ? a->max_step - base : 0;
    if (ran > 0 && a->training_seconds > 0) {
      a->steps_per_second = double(ran) / a->training_seconds;
      // The steps since the last commit were computed for nothing: at this attempt's pace.
      a->lost_seconds = double(a->lost_steps) * a->training_seconds / double(ran);
      acc.lose(a->lost_seconds, a->nproc);
    }
    lost_steps += a->lost_steps;
    if (a->max_step > 0 && (!step || a->max_step >= *step)) note_step(a->max_step, "attempt end");
    attempt_open = false;
    state = "stopping";
  }

  void on_backoff(const TimelineRecord& r) {
    std::string cls = "unknown";
    for (auto it = attempts.rbegin(); it != attempts.rend(); ++it)
      if (it->end_unix_ms) {
        cls = it->end_class.empty() ? "unknown" : it->end_class;
        it->backoff_seconds = r.number("seconds");
        it->restart_reason = r.text("why");
        break;
      }
    if (shrink_pending) cls = "preempted";  // notified nodes left; the rest go on
    shrink_pending = false;
    restarts.push_back({r.time_unix_ms, cls, runs.empty() ? 0 : runs.size() - 1});
    if (spend != Spend::kNone) switch_to(r.time_unix_ms, Spend::kRestart);
    state = "backoff";
  }

  void on_finish(const TimelineRecord& r) {
    if (runs.empty()) return;
    RunView& run = runs.back();
    run.finish_unix_ms = r.time_unix_ms;
    run.final_state = r.text("state");
    if (auto code = r.number("exit_code")) run.exit_code = static_cast<int64_t>(*code);
    run.summary = r.text("summary");
    close_run(r.time_unix_ms);
    state = run.final_state.empty() ? "finished" : run.final_state;
  }

  void on_notice(const TimelineRecord& r, bool shortened) {
    NoticeView n;
    n.time_unix_ms = r.time_unix_ms;
    n.source = r.text("source");
    n.kind = r.text("kind");
    n.reason = r.text("reason");
    n.action = r.text("action");
    n.preemption = r.flag("preemption").value_or(false);
    n.shortened = shortened;
    n.seconds_left = r.number("seconds_left");
    push_bounded(notices, std::move(n));
  }

  void feed(const TimelineRecord& r) {
    ++record_count;
    if (!first_ms) first_ms = r.time_unix_ms;
    last_ms = std::max(last_ms.value_or(r.time_unix_ms), r.time_unix_ms);
    if (runs.empty() && r.type != "start" && r.type != "launch") open_run(r, 0);
    // A `start` belongs to the run it opens; a run killed without `finish` ends at its last record.
    if (run_open && r.type != "start")
      runs.back().last_unix_ms = std::max(runs.back().last_unix_ms, r.time_unix_ms);
    if (opt.keep_records) records.push_back(r);
    if (is_evidence(r.type)) push_bounded(evidence, r);
    const std::string& t = r.type;
    if (t == "start") return on_start(r);
    if (t == "launch") return on_launch(r);
    if (t == "ranks_ready") return on_ranks_ready(r);
    if (t == "checkpoint_committed") return on_committed(r);
    if (t == "hang") return on_hang(r);
    if (t == "teardown") return on_teardown(r);
    if (t == "attempt_end") return on_attempt_end(r);
    if (t == "backoff") return on_backoff(r);
    if (t == "finish") return on_finish(r);
    if (t == "notice") return on_notice(r, false);
    if (t == "deadline_shortened") return on_notice(r, true);
    if (t == "shrink") shrink_pending = true;
    if (t == "give_up" && !attempts.empty()) attempts.back().gave_up = r.text("why");
    if (t == "checkpoint_now" && r.text("kind") == "emergency") {
      if (AttemptView* a = open_attempt(r)) {
        a->emergency_at_step = r.count("at_step");
        if (state == "running" || state == "launching") state = "checkpointing";
      }
    }
    if (t == "node_joined" && spend == Spend::kWaiting && r.count("nodes").value_or(1) > 0)
      switch_to(r.time_unix_ms, Spend::kRestart);  // looking for the resume checkpoint
    if (t == "node_lost" && r.count("nodes") == uint64_t{0} && spend != Spend::kNone &&
        spend != Spend::kLaunching)
      switch_to(r.time_unix_ms, Spend::kWaiting);
  }

  std::vector<RestartCount> restart_counts(int64_t now) const {
    std::map<std::string, RestartCount> by;
    for (const auto& [cls, budget] : opt.budgets) {
      RestartCount& c = by[cls];
      c.exit_class = cls;
      c.max = budget.max_restarts;
      c.window_seconds = std::chrono::duration<double>(budget.window).count();
    }
    const size_t latest = runs.empty() ? 0 : runs.size() - 1;
    for (const auto& e : restarts) {
      const std::string key = opt.budgets.empty() ? e.exit_class : budget_class(e.exit_class);
      RestartCount& c = by[key];
      c.exit_class = key;
      ++c.used_total;
      if (e.run == latest) ++c.used;
    }
    std::vector<RestartCount> out;
    for (auto& [cls, c] : by) {
      if (c.max && c.window_seconds) {
        const auto window_ms = static_cast<int64_t>(*c.window_seconds * 1000.0);
        uint32_t in_window = 0;
        for (const auto& e : restarts)
          if (e.run == latest && budget_class(e.exit_class) == cls && e.time_unix_ms > now - window_ms)
            ++in_window;
        c.left = *c.max > in_window ? *c.max - in_window : 0;
      }
      out.push_back(std::move(c));
    }
    return out;
  }

  // The accumulator with the phase still open at `now` counted.
  policies::GoodputTotals totals_at(int64_t now) const {
    policies::GoodputAccumulator a = acc;
    const double open = run_open ? seconds_between(since, now) : 0.0;
    // Launch time not yet known to be training is restart until the attempt says otherwise.
    a.badput(policies::Badput::kRestart, pending_seconds + pending_stall, gpus);
    switch (spend) {
      case Spend::kNone: break;
      case Spend::kWaiting: a.badput(policies::Badput::kWaiting, open, gpus); break;
      case Spend::kRestart:
      case Spend::kLaunching: a.badput(policies::Badput::kRestart, open, gpus); break;
      case Spend::kTraining: a.training(open, gpus); break;
    }
    return a.totals();
  }
};

Timeline::Timeline(TimelineOptions options) : s_(std::make_unique<State>()) {
  s_->opt = std::move(options);
}
Timeline::~Timeline() = default;
Timeline::Timeline(Timeline&&) noexcept = default;
Timeline& Timeline::operator=(Timeline&&) noexcept = default;

void Timeline::add(const TimelineRecord& record) { s_->feed(record); }

void Timeline::add(int64_t time_unix_ms, std::string_view type, const EventFields& fields) {
  s_->feed(TimelineRecord{time_unix_ms, std::string(type), fields});
}

bool Timeline::add_line(std::string_view line) {
  if (line.find_first_not_of(" \t\r\n") == std::string_view::npos) return true;
  auto r = parse_timeline_line(line);
  if (!r) {
    ++s_->skipped;
    return false;
  }
  s_->feed(*r);
  return true;
}

policies::GoodputTotals Timeline::goodput(int64_t now_unix_ms) const {
  return s_->totals_at(now_unix_ms);
}

const std::vector<TimelineRecord>& Timeline::records() const { return s_->records; }
uint64_t Timeline::skipped_lines() const { return s_->skipped; }
std::optional<int64_t> Timeline::last_unix_ms() const { return s_->last_ms; }

TimelineView Timeline::view(int64_t now) const {
  const State& s = *s_;
  TimelineView v;
  v.state = s.state;
  v.finished = !s.runs.empty() && s.runs.back().finish_unix_ms.has_value();
  v.step = s.step;
  v.step_source = s.step_source;
  v.last_checkpoint = s.last_checkpoint;
  v.checkpoints = s.checkpoints;
  v.lost_steps = s.lost_steps;
  v.restarts = s.restart_counts(now);
  v.notices = s.notices;
  v.attempts = s.attempts;
  v.runs = s.runs;
  v.evidence = s.evidence;
  v.goodput = s.totals_at(now);
  v.first_unix_ms = s.first_ms.value_or(0);
  v.last_unix_ms = s.last_ms.value_or(0);
  v.records = s.record_count;
  v.skipped_lines = s.skipped;
  if (!v.attempts.empty()) {
    AttemptView& last = v.attempts.back();
    v.attempt = last.attempt;
    v.nproc = last.nproc;
    if (s.attempt_open) {
      // Live: training so far, and the pace up to the last commit of this attempt.
      if (s.spend == Spend::kTraining) last.training_seconds += seconds_between(s.since, now);
      last.steps_per_second = s.commit_pace(last);
    }
  }
  for (auto it = v.attempts.rbegin(); it != v.attempts.rend(); ++it)
    if (it->steps_per_second) {
      v.steps_per_second = it->steps_per_second;
      break;
    }
  return v;
}

std::string goodput_metrics(const policies::GoodputTotals& t) {
  std::string out;
  auto line = [&](const std::string& text) { out += text + "\n"; };
  line("# HELP shardguard_goodput_ratio Productive GPU-seconds / allocated GPU-seconds.");
  line("# TYPE shardguard_goodput_ratio gauge");
  line("shardguard_goodput_ratio " + plain_number(t.ratio(), 6));
  line("# HELP shardguard_allocated_gpu_seconds_total GPU-seconds allocated to the job.");
  line("# TYPE shardguard_allocated_gpu_seconds_total counter");
  line("shardguard_allocated_gpu_seconds_total " + plain_number(t.allocated_gpu_seconds, 3));
  line("# HELP shardguard_productive_gpu_seconds GPU-seconds of training steps that were kept.");
  line("# TYPE shardguard_productive_gpu_seconds gauge");
  line("shardguard_productive_gpu_seconds " + plain_number(t.productive_gpu_seconds, 3));
  line("# HELP shardguard_badput_seconds_total Allocated GPU-seconds not spent on kept steps, by "
       "cause.");
  line("# TYPE shardguard_badput_seconds_total counter");
  for (policies::Badput cause : policies::kAllBadput)
    line("shardguard_badput_seconds_total{cause=\"" + std::string(policies::badput_name(cause)) +
         "\"} " + plain_number(t.badput(cause), 3));
  return out;
}

}  // namespace shardguard::supervisor
