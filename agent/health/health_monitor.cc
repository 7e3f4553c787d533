#include "agent/health/health_monitor.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/units.h"

namespace shardguard::agent {
namespace {

// A check whose warnings only advise repeats its warning every this many runs (with the
// disk's 30 s interval: every 30 minutes).
constexpr int kAdviceRepeat = 60;

}  // namespace

struct HealthMonitor::Entry {
  std::unique_ptr<HealthCheck> check;
  CheckPolicy policy;
  std::unique_ptr<Timer> timer;     // the next run
  std::unique_ptr<Timer> deadline;  // the outstanding run's timeout
  CheckStatus st;
  SteadyTime grace_end{};
  uint64_t run_id = 0;
  bool running = false;
  int consecutive_successes = 0;
  int advice_runs = 0;  // runs in a row with an advisory warning
};

HealthMonitor::HealthMonitor(const Clock& clock, TimerFactory& timers, RandomFn random)
    : clock_(clock), timers_(timers), random_(std::move(random)) {}

HealthMonitor::~HealthMonitor() { stop(); }

void HealthMonitor::add(std::unique_ptr<HealthCheck> check, CheckPolicy policy) {
  auto e = std::make_unique<Entry>();
  e->st.name = std::string(check->name());
  e->check = std::move(check);
  e->policy = policy;
  e->policy.failure_threshold = std::max(1, policy.failure_threshold);
  e->policy.success_threshold = std::max(1, policy.success_threshold);
  e->timer = timers_.make_timer();
  e->deadline = timers_.make_timer();
  entries_.push_back(std::move(e));
}

void HealthMonitor::start(UnhealthyCallback on_unhealthy, HealthyCallback on_healthy) {
  stop();
  on_unhealthy_ = std::move(on_unhealthy);
  on_healthy_ = std::move(on_healthy);
  unhealthy_ = false;
  const SteadyTime now = clock_.now();
  for (auto& e : entries_) {
    e->st = CheckStatus{};
    e->st.name = std::string(e->check->name());
    e->consecutive_successes = 0;
    e->advice_runs = 0;
    e->grace_end = now + e->policy.start_grace;
    schedule(*e, e->policy.initial_delay);
  }
}

void HealthMonitor::stop() {
  guard_.invalidate();
  for (auto& e : entries_) {
    e->timer->cancel();
    e->deadline->cancel();
    e->running = false;
  }
}

std::vector<HealthFinding> HealthMonitor::evidence() const {
  std::vector<HealthFinding> out;
  for (const auto& e : entries_) {
    if (!e->st.healthy) out.push_back(e->st.failing);
  }
  return out;
}

std::vector<CheckStatus> HealthMonitor::status() const {
  std::vector<CheckStatus> out;
  for (const auto& e : entries_) out.push_back(e->st);
  return out;
}

HealthCheck* HealthMonitor::find(std::string_view name) const {
  for (const auto& e : entries_) {
    if (e->check->name() == name) return e->check.get();
  }
  return nullptr;
}

Duration HealthMonitor::jittered(const CheckPolicy& policy) {
  const double j = std::clamp(policy.jitter, 0.0, 1.0);
  const double r = random_ ? std::clamp(random_(), 0.0, 1.0) : 0.5;
  const double factor = 1.0 + j * (2.0 * r - 1.0);
  return Duration(
      static_cast<Duration::rep>(static_cast<double>(policy.interval.count()) * factor));
}

void HealthMonitor::schedule(Entry& e, Duration delay) {
  e.timer->arm(delay, guard_.wrap([this, &e] { run(e); }));
}

void HealthMonitor::run(Entry& e) {
  const uint64_t id = ++e.run_id;
  e.running = true;
  e.deadline->arm(e.policy.timeout, guard_.wrap([this, &e, id] {
    HealthFinding f;
    f.check = e.st.name;
    f.severity = HealthFinding::kWarning;
    f.evidence = "no answer within " + format_duration(e.policy.timeout);
    on_answer(e, id, std::move(f), true);
  }));
  e.check->run(guard_.wrap([this, &e, id](HealthFinding f) { on_answer(e, id, std::move(f)); }));
}

void HealthMonitor::on_answer(Entry& e, uint64_t run_id, HealthFinding finding, bool timed_out) {
  if (!e.running || run_id != e.run_id) return;  // a late answer after the timeout
  e.running = false;
  e.deadline->cancel();
  if (finding.check.empty()) finding.check = e.st.name;
  judge(e, finding, timed_out);
  schedule(e, jittered(e.policy));
  update_node();
}

void HealthMonitor::judge(Entry& e, const HealthFinding& f, bool timed_out) {
  CheckStatus& s = e.st;
  const bool was_available = s.available;
  s.last = f;
  ++s.counters.attempts;
  if (f.not_available) {
    ++s.counters.unavailable;
    s.available = false;
    if (was_available) spdlog::info("health: check '{}' {}", s.name, f.evidence);
    return;
  }
  s.available = true;
  const bool in_grace = s.in_grace && clock_.now() < e.grace_end;
  s.in_grace = in_grace;
  if (f.severity == HealthFinding::kOk) {
    ++s.counters.successes;
    s.in_grace = false;  // as mesos: the first success ends the grace period
    if (e.advice_runs > 0 && !s.fatal)
      spdlog::info("health: check '{}' ok again: {}", s.name, f.evidence);
    e.advice_runs = 0;
    s.consecutive_failures = 0;
    ++e.consecutive_successes;
    if (!s.healthy && !s.fatal && e.consecutive_successes >= e.policy.success_threshold) {
      s.healthy = true;
      spdlog::info("health: check '{}' recovered", s.name);
    }
    return;
  }
  ++s.counters.failures;
  e.consecutive_successes = 0;
  if (f.severity == HealthFinding::kFatal) {  // no threshold, no grace, no recovery
    ++s.consecutive_failures;
    if (!s.fatal) spdlog::error("health: check '{}' fatal: {}", s.name, f.evidence);
    s.healthy = false;
    s.fatal = true;
    s.failing = f;
    return;
  }
  // A check that stops answering (a hung filesystem) is counted as usual.
  if (!e.policy.warnings_make_unhealthy && !timed_out) {
    // Advice, not a verdict: said when it starts, then every so often, never unhealthy.
    if (e.advice_runs++ % kAdviceRepeat == 0 && !s.fatal)
      spdlog::warn("health: check '{}': {}", s.name, f.evidence);
    return;
  }
  if (in_grace) {
    spdlog::info("health: check '{}' failed during the start grace (not counted): {}", s.name,
                 f.evidence);
    return;
  }
  ++s.consecutive_failures;
  if (s.fatal) return;  // keep the fatal evidence
  if (!s.healthy) {
    s.failing = f;  // still unhealthy: keep the evidence current
    return;
  }
  if (s.consecutive_failures >= e.policy.failure_threshold) {
    s.healthy = false;
    s.failing = f;
    spdlog::warn("health: check '{}' unhealthy after {} consecutive failures: {}", s.name,
                 s.consecutive_failures, f.evidence);
  } else {
    spdlog::info("health: check '{}' failed ({}/{}): {}", s.name, s.consecutive_failures,
                 e.policy.failure_threshold, f.evidence);
  }
}

void HealthMonitor::update_node() {
  const bool any =
      std::any_of(entries_.begin(), entries_.end(), [](const auto& e) { return !e->st.healthy; });
  if (any && !unhealthy_) {
    unhealthy_ = true;
    if (auto cb = on_unhealthy_) cb(evidence());
  } else if (!any && unhealthy_) {
    unhealthy_ = false;
    if (auto cb = on_healthy_) cb();
  }
}

}  // namespace shardguard::agent
