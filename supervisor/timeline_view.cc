// The timeline model's figures at `now` (supervisor/timeline.h): the view, the restart budgets
// left, the goodput with the phase still open, and the public face of Timeline.
#include <algorithm>

#include "supervisor/timeline_state.h"
#include "supervisor/timeline_text.h"

namespace shardguard::supervisor {

using namespace timeline_detail;

// Steps per training second of the open attempt up to its last commit.
std::optional<double> Timeline::State::commit_pace(const AttemptView& a) const {
  const uint64_t base = a.resume_step.value_or(0);
  if (!step_at_commit || *step_at_commit <= base || train_at_commit <= 0) return std::nullopt;
  return double(*step_at_commit - base) / train_at_commit;
}

std::vector<RestartCount> Timeline::State::restart_counts(int64_t now) const {
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
        if (e.run == latest && budget_class(e.exit_class) == cls &&
            e.time_unix_ms > now - window_ms)
          ++in_window;
      c.left = *c.max > in_window ? *c.max - in_window : 0;
    }
    out.push_back(std::move(c));
  }
  return out;
}

// The accumulator with the phase still open at `now` counted.
policies::GoodputTotals Timeline::State::totals_at(int64_t now) const {
  policies::GoodputAccumulator a = acc;
  const double open = run_open ? seconds_between(since, now) : 0.0;
  // Launch time not yet known to be training is restart until the attempt says otherwise.
  a.badput(policies::Badput::kRestart, pending_seconds + pending_stall, gpus);
  switch (spend) {
    case Spend::kNone:
      break;
    case Spend::kWaiting:
      a.badput(policies::Badput::kWaiting, open, gpus);
      break;
    case Spend::kRestart:
    case Spend::kLaunching:
      a.badput(policies::Badput::kRestart, open, gpus);
      break;
    case Spend::kTraining:
      a.training(open, gpus);
      break;
  }
  return a.totals();
}

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

void Timeline::add_lines(std::string_view text) {
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    add_line(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
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
  v.transfer = s.transfer;
  v.checkpoints = s.checkpoints;
  v.lost_steps = s.lost_steps;
  v.restarts = s.restart_counts(now);
  v.notices = s.notices;
  for (const auto& [id, n] : s.nodes) v.nodes.push_back(n);
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
  line(
      "# HELP shardguard_badput_seconds_total Allocated GPU-seconds not spent on kept steps, by "
      "cause.");
  line("# TYPE shardguard_badput_seconds_total counter");
  for (policies::Badput cause : policies::kAllBadput)
    line("shardguard_badput_seconds_total{cause=\"" + std::string(policies::badput_name(cause)) +
         "\"} " + plain_number(t.badput(cause), 3));
  return out;
}

}  // namespace shardguard::supervisor
