#include "supervisor/supervisor.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "checkpoint/catalog.h"
#include "checkpoint/paths.h"
#include "checkpoint/retention.h"
#include "core/units.h"
#include "hooks/control_server.h"
#include "io/process.h"
#include "policies/backoff.h"
#include "policies/checkpoint_interval.h"
#include "policies/exit_class.h"
#include "policies/restart_policy.h"
#include "supervisor/event_log.h"
#include "supervisor/hang_report.h"
#include "supervisor/rank_env.h"

namespace shardguard::supervisor {
namespace {

using namespace std::chrono_literals;

double seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

policies::RestartPolicyOptions policy_options(const JobConfig& c) {
  auto b = [](const RestartBudget& r) { return policies::Budget{r.max_restarts, r.window}; };
  return {b(c.crash), b(c.hang), b(c.infrastructure), b(c.preempted), c.no_progress_limit};
}

std::string attempt_dir_name(uint64_t attempt) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "attempt-%03llu", static_cast<unsigned long long>(attempt));
  return buf;
}

}  // namespace

std::string_view supervisor_state_name(SupervisorState s) {
  switch (s) {
    case SupervisorState::kPending: return "pending";
    case SupervisorState::kLaunching: return "launching";
    case SupervisorState::kRunning: return "running";
    case SupervisorState::kCheckpointing: return "checkpointing";
    case SupervisorState::kDraining: return "draining";
    case SupervisorState::kBackoff: return "backoff";
    case SupervisorState::kSucceeded: return "succeeded";
    case SupervisorState::kFailed: return "failed";
    case SupervisorState::kPreempted: return "preempted";
  }
  return "unknown";
}

struct Rank {
  uint32_t rank = 0;
  std::unique_ptr<io::ChildProcess> child;
  pid_t pid = 0, pgid = 0;
  std::optional<io::ExitStatus> exit;
  bool killed_by_us = false;  // still running when the teardown began
};

struct Supervisor::Impl {
  SupervisorDeps d;
  JobConfig cfg;
  SupervisorState state = SupervisorState::kPending;
  bool finished = false;
  int exit_code = 0;
  uint64_t attempt = 0;

  EventLog events;
  std::string socket_path;
  std::unique_ptr<hooks::ControlServer> control;
  std::unique_ptr<Timer> tick, backoff_timer, deadline_timer, drain_timer, periodic_timer;
  policies::RestartPolicy policy;
  policies::ExponentialBackoff backoff;
  policies::CheckpointCostEstimator cost;
  policies::FailureRateEstimator failure_rate;

  // The current attempt.
  std::vector<Rank> ranks;
  SteadyTime attempt_start{};
  std::optional<uint64_t> resume_step;
  std::optional<uint64_t> committed_this_attempt;
  bool tearing_down = false;
  bool swept = false;
  int pending_kills = 0;
  bool hang_detected = false;
  bool use_previous = false;
  uint64_t emergency_at_step = 0;
  std::map<uint64_t, SteadyTime> save_begin;
  uint64_t first_step = 0;
  SteadyTime first_step_time{};
  std::set<uint32_t> ready_ranks;  // ranks that heartbeated in this attempt
  bool ranks_ready = false;

  std::optional<StopRequest> stop;
  bool node_unhealthy = false;
  std::function<void(uint64_t)> on_emergency_committed;
  std::function<void(std::string_view, std::map<std::string, std::string>)> on_lifecycle;

  void lifecycle(std::string_view event, std::map<std::string, std::string> fields) {
    fields["job_id"] = cfg.job_id;
    fields["attempt"] = std::to_string(attempt);
    if (on_lifecycle) on_lifecycle(event, std::move(fields));
  }

  // Metrics.
  std::map<std::string, uint64_t> restarts;
  uint64_t last_committed = 0;
  uint64_t lost_steps = 0;
  double checkpoint_seconds = 0;
  uint64_t checkpoints = 0;
  Duration running_time{};
  SteadyTime run_start{};

  Impl(SupervisorDeps deps, JobConfig c)
      : d(deps),
        cfg(std::move(c)),
        policy(policy_options(cfg)),
        backoff({cfg.backoff_initial, cfg.backoff_max, cfg.backoff_multiplier, cfg.backoff_jitter},
                d.uniform01) {}

  // ---- attempts -------------------------------------------------------------------------

  // Attempt numbers keep growing across `shardguard run` invocations on the same run dir
  // and checkpoints, so fencing can tell a zombie of an earlier run from the current one.
  uint64_t first_attempt_number() {
    uint64_t next = 0;
    if (auto past = read_events(events.path()); past.ok())
      for (const auto& e : *past)
        if (e.type == "launch")
          for (const auto& [k, v] : e.fields)
            if (k == "attempt") next = std::max<uint64_t>(next, std::stoull(v) + 1);
    if (auto entries = checkpoint::list_checkpoints(d.fs, cfg.checkpoint_dir, checkpoint::Verify::kSize);
        entries.ok())
      for (const auto& e : *entries)
        if (e.manifest) next = std::max(next, e.manifest->attempt + 1);
    return next;
  }

  // Newest complete checkpoint (the one before it when `use_previous`), logging skips.
  std::optional<checkpoint::CatalogEntry> pick_resume() {
    const auto verify = cfg.resume_verify == VerifyMode::kChecksum ? checkpoint::Verify::kChecksum
                                                                   : checkpoint::Verify::kSize;
    auto entries = checkpoint::list_checkpoints(d.fs, cfg.checkpoint_dir, verify);
    if (!entries.ok()) {
      spdlog::warn("resume: {}", entries.error().message());
      return std::nullopt;
    }
    bool skip_one = use_previous;
    for (const auto& e : *entries) {
      if (e.state != checkpoint::CheckpointState::kComplete) {
        events.write("resume_skipped", {{"step", e.step},
                                        {"state", std::string(checkpoint_state_name(e.state))},
                                        {"why", e.reason}});
        spdlog::warn("resume: skipping step {}: {}", e.step, e.reason);
        continue;
      }
      if (skip_one) {
        skip_one = false;
        events.write("resume_skipped", {{"step", e.step}, {"state", std::string("complete")},
                                        {"why", std::string("restarts from it made no progress")}});
        spdlog::warn("resume: skipping step {}: restarts from it made no progress", e.step);
        continue;
      }
      return e;
    }
    return std::nullopt;
  }

  void launch_attempt() {
    state = SupervisorState::kLaunching;
    ranks.clear();
    tearing_down = swept = hang_detected = false;
    pending_kills = 0;
    committed_this_attempt.reset();
    save_begin.clear();
    first_step = 0;
    first_step_time = {};
    ready_ranks.clear();
    ranks_ready = false;
    attempt_start = d.clock.now();

    auto resume = pick_resume();
    use_previous = false;
    resume_step = resume ? std::optional(resume->step) : std::nullopt;
    const std::string manifest =
        resume ? join_path(resume->dir, std::string(checkpoint::kManifestName)) : "";
    const std::string dir = join_path(cfg.run_dir, attempt_dir_name(attempt));
    if (auto st = d.fs.create_dirs(dir); !st.ok()) return fail_hard(st.error());

    RankEnvInputs in{cfg, attempt, manifest, socket_path};
    for (uint32_t r = 0; r < cfg.nproc; ++r) {
      io::ProcessSpec spec;
      spec.argv = cfg.command;
      spec.env = rank_environment(in, r);
      spec.stdout_path = spec.stderr_path = join_path(dir, "rank-" + std::to_string(r) + ".log");
      spec.die_with_parent = true;
      auto child = d.launcher.launch(spec);
      if (!child.ok()) {
        // The command cannot start at all: restarting will not help.
        for (auto& rk : ranks) (void)rk.child->signal_group(SIGKILL);
        return fail_hard(child.error());
      }
      Rank rk;
      rk.rank = r;
      rk.pid = (*child)->pid();
      rk.pgid = (*child)->pgid();
      rk.child = std::move(*child);
      ranks.push_back(std::move(rk));
    }
    for (auto& rk : ranks) {
      const uint32_t r = rk.rank;
      const uint64_t this_attempt = attempt;
      rk.child->async_wait([this, r, this_attempt](Result<io::ExitStatus> st) {
        if (this_attempt != attempt) return;
        on_rank_exit(r, st.ok() ? *st : io::ExitStatus::killed(0));
      });
    }
    state = SupervisorState::kRunning;
    events.write("launch", {{"attempt", attempt},
                            {"nproc", uint64_t{cfg.nproc}},
                            {"resume_step", resume_step ? int64_t(*resume_step) : int64_t{-1}},
                            {"resume_manifest", manifest}});
    spdlog::info("attempt {}: launched {} rank(s), {}", attempt, cfg.nproc,
                 resume_step ? "resuming from step " + std::to_string(*resume_step)
                             : std::string("fresh start"));
    arm_tick();
    arm_periodic();
  }

  void on_rank_exit(uint32_t r, io::ExitStatus status) {
    Rank& rk = ranks.at(r);
    rk.exit = status;
    events.write("rank_exit", {{"attempt", attempt}, {"rank", uint64_t{r}},
                               {"status", status.describe()},
                               {"killed_by_us", rk.killed_by_us}});
    spdlog::log(status.success() ? spdlog::level::info : spdlog::level::warn,
                "attempt {}: rank {} {}", attempt, r, status.describe());
    const bool all_exited =
        std::all_of(ranks.begin(), ranks.end(), [](const Rank& x) { return x.exit.has_value(); });
    if (tearing_down) return;  // the teardown's completion ends the attempt
    if (state == SupervisorState::kRunning && !status.success() && !rk.killed_by_us) {
      begin_teardown("rank " + std::to_string(r) + " " + status.describe());
      return;
    }
    if (all_exited) begin_teardown("every rank exited");
  }

  // Stops every process of every rank's group (SIGTERM, then SIGKILL after the grace) and
  // waits until none is left; then the attempt ends.
  void begin_teardown(const std::string& why) {
    if (tearing_down) return;
    tearing_down = true;
    if (tick) tick->cancel();
    if (periodic_timer) periodic_timer->cancel();
    if (drain_timer) drain_timer->cancel();
    if (deadline_timer) deadline_timer->cancel();
    events.write("teardown", {{"attempt", attempt}, {"why", why}});
    spdlog::info("attempt {}: teardown: {}", attempt, why);
    pending_kills = static_cast<int>(ranks.size());
    if (pending_kills == 0) return attempt_ended();
    const uint64_t this_attempt = attempt;
    for (auto& rk : ranks) {
      if (!rk.exit) rk.killed_by_us = true;
      io::KillTreeOptions o;
      o.grace = cfg.term_grace;
      io::async_kill_tree(d.loop, rk.pgid, o, rk.exit ? nullptr : rk.child.get(),
                          [this, this_attempt](Result<io::KillTreeReport> r) {
                            if (this_attempt != attempt) return;
                            if (!r.ok()) spdlog::error("teardown: {}", r.error().message());
                            if (--pending_kills == 0) attempt_ended();
                          });
    }
  }

  void attempt_ended() {
    const auto now = d.clock.now();
    running_time += now - attempt_start;
    uint64_t max_step = control ? control->max_step() : 0;
    const uint64_t lost = max_step > last_committed ? max_step - last_committed : 0;

    policies::ExitContext ctx;
    for (const auto& rk : ranks)
      if (rk.exit && !rk.killed_by_us)
        ctx.exits.push_back({rk.rank, rk.exit->signaled, rk.exit->code, rk.exit->signal});
    ctx.notice_active = stop.has_value();
    ctx.hang_detected = hang_detected;
    ctx.node_unhealthy = node_unhealthy;
    ctx.torn_down_by_us = std::any_of(ranks.begin(), ranks.end(),
                                      [](const Rank& r) { return r.killed_by_us; });
    ctx.preemption_exit_codes = cfg.preemption_exit_codes;
    const auto cls = policies::classify_exit(ctx);
    const std::string description = policies::describe_exit(ctx);
    events.write("attempt_end", {{"attempt", attempt},
                                 {"class", std::string(policies::exit_class_name(cls))},
                                 {"detail", description},
                                 {"last_committed_step", last_committed},
                                 {"last_step", max_step},
                                 {"lost_steps", cls == policies::ExitClass::kSuccess ? 0 : lost}});
    spdlog::info("attempt {}: ended: {} ({})", attempt, policies::exit_class_name(cls), description);

    // Training that finished on its own while a notice was pending is simply done.
    const bool all_done = !ranks.empty() && std::all_of(ranks.begin(), ranks.end(), [](const Rank& r) {
      return r.exit && r.exit->success() && !r.killed_by_us;
    });
    if (stop && !all_done) return finish(SupervisorState::kPreempted, kExitPreemptedCode);
    if (stop) return finish(SupervisorState::kSucceeded, 0);
    if (cls == policies::ExitClass::kSuccess) return finish(SupervisorState::kSucceeded, 0);
    lost_steps += lost;
    if (cls != policies::ExitClass::kPreempted) failure_rate.record_failure(now);
    auto decision = policy.on_exit(cls, now, resume_step, committed_this_attempt);
    if (!decision.restart) {
      events.write("give_up", {{"attempt", attempt}, {"class", std::string(policies::exit_class_name(cls))},
                               {"why", decision.reason}});
      spdlog::error("giving up: {}", decision.reason);
      lifecycle("give_up", {{"class", std::string(policies::exit_class_name(cls))},
                            {"reason", decision.reason}});
      return finish(SupervisorState::kFailed, kExitGaveUpCode);
    }
    restarts[std::string(policies::exit_class_name(cls))]++;
    use_previous = decision.use_previous_checkpoint;
    if (now - attempt_start >= cfg.healthy_after) backoff.reset();
    const Duration delay = backoff.next();
    events.write("backoff", {{"attempt", attempt}, {"seconds", seconds(delay)},
                             {"why", decision.reason}});
    spdlog::info("restarting in {} ({})", format_duration(delay), decision.reason);
    lifecycle("restart", {{"class", std::string(policies::exit_class_name(cls))},
                          {"reason", decision.reason}, {"detail", description}});
    state = SupervisorState::kBackoff;
    ++attempt;
    backoff_timer->arm(delay, [this] { launch_attempt(); });
  }

  // ---- emergency ------------------------------------------------------------------------

  uint64_t step_margin() const {
    // Enough steps that no rank passes at_step before the request reaches it: heartbeats
    // come at most every 100 ms, so the known step can lag that much, plus delivery.
    const uint64_t max_step = control->max_step();
    const double elapsed = seconds(d.clock.now() - first_step_time);
    if (first_step_time == SteadyTime{} || elapsed <= 0) return 2;
    const double rate = double(max_step - first_step) / elapsed;
    return std::max<uint64_t>(2, static_cast<uint64_t>(std::ceil(rate * 0.3)) + 1);
  }

  void request_stop(const StopRequest& req) {
    if (finished || stop) return;
    stop = req;
    const Duration left = req.deadline - d.clock.wall_now();
    events.write("notice", {{"reason", req.reason}, {"deadline_unix_ms", to_unix_ms(req.deadline)},
                            {"seconds_left", seconds(left)}});
    spdlog::warn("stop requested ({}): {} left", req.reason, format_duration(left));
    lifecycle("preempt_notice", {{"reason", req.reason},
                                 {"deadline_unix_ms", std::to_string(to_unix_ms(req.deadline))}});
    if (state == SupervisorState::kBackoff || state == SupervisorState::kPending) {
      if (backoff_timer) backoff_timer->cancel();
      return finish(SupervisorState::kPreempted, kExitPreemptedCode);
    }
    if (tearing_down) return;
    const bool any_client = std::any_of(control->ranks().begin(), control->ranks().end(),
                                        [](const auto& kv) { return kv.second.connected; });
    if (!any_client) return begin_teardown("stop: no rank speaks the control protocol");

    emergency_at_step = control->max_step() + step_margin();
    const WallTime deadline = req.deadline - cfg.safety_margin;
    control->send_all(hooks::CheckpointNow{to_unix_ms(deadline), req.reason, emergency_at_step});
    for (auto& rk : ranks)
      if (!rk.exit && cfg.checkpoint_signal != 0) (void)rk.child->signal(cfg.checkpoint_signal);
    state = SupervisorState::kCheckpointing;
    const Duration estimate = cost.estimate(Duration{0});
    events.write("checkpoint_now", {{"at_step", emergency_at_step},
                                    {"deadline_unix_ms", to_unix_ms(deadline)},
                                    {"estimated_write_seconds", seconds(estimate)}});
    if (estimate > deadline - d.clock.wall_now())
      spdlog::error("emergency checkpoint needs about {} but only {} is left",
                    format_duration(estimate), format_duration(deadline - d.clock.wall_now()));
    deadline_timer->arm(std::max<Duration>(deadline - d.clock.wall_now(), 0s),
                        [this] { begin_teardown("emergency deadline reached"); });
  }

  // ---- control socket events ------------------------------------------------------------

  void on_heartbeat(const hooks::RankStatus& r) {
    if (first_step_time == SteadyTime{}) {
      first_step_time = d.clock.now();
      first_step = r.step;
    }
    if (!ranks_ready && r.attempt == attempt) {
      ready_ranks.insert(r.rank);
      if (ready_ranks.size() == cfg.nproc) {
        ranks_ready = true;
        events.write("ranks_ready", {{"attempt", attempt},
                                     {"seconds_since_launch", seconds(d.clock.now() - attempt_start)}});
      }
    }
  }

  void on_committed(uint32_t rank, uint64_t step, const std::string& manifest) {
    Duration took{};
    if (auto it = save_begin.find(step); it != save_begin.end()) {
      took = d.clock.now() - it->second;
      cost.record(took);
      save_begin.erase(it);
    }
    last_committed = std::max(last_committed, step);
    committed_this_attempt = std::max(committed_this_attempt.value_or(0), step);
    checkpoint_seconds += seconds(took);
    ++checkpoints;
    events.write("checkpoint_committed", {{"attempt", attempt}, {"step", step},
                                          {"seconds", seconds(took)}, {"manifest", manifest}});
    spdlog::info("checkpoint of step {} committed in {}", step, format_duration(took));
    lifecycle("checkpoint_committed", {{"step", std::to_string(step)}, {"manifest", manifest}});
    apply_retention();
    if (state == SupervisorState::kCheckpointing && step >= emergency_at_step) {
      state = SupervisorState::kDraining;
      if (on_emergency_committed) on_emergency_committed(step);
      // The ranks exit by themselves after an emergency save; give them a moment.
      const Duration left = stop->deadline - d.clock.wall_now();
      drain_timer->arm(std::clamp<Duration>(left, 0s, 10s),
                       [this] { begin_teardown("ranks did not exit after the emergency checkpoint"); });
    }
  }

  void apply_retention() {
    if (cfg.keep_last == 0) return;
    auto entries = checkpoint::list_checkpoints(d.fs, cfg.checkpoint_dir, checkpoint::Verify::kSize);
    if (!entries.ok()) return;
    checkpoint::RetentionPolicy p{cfg.keep_last, cfg.keep_every, {}};
    if (resume_step) p.protected_steps.insert(*resume_step);
    auto removed = checkpoint::apply_retention(d.fs, checkpoint::plan_retention(*entries, p));
    if (!removed.ok()) spdlog::warn("retention: {}", removed.error().message());
  }

  // ---- timers ---------------------------------------------------------------------------

  void arm_tick() {
    tick->arm(std::min<Duration>(cfg.hang_timeout / 4, 250ms), [this] {
      check_hangs();
      if (!tearing_down && state == SupervisorState::kRunning) arm_tick();
    });
  }

  void check_hangs() {
    const auto now = d.clock.now();
    for (const auto& [r, st] : control->ranks()) {
      if (st.last_heartbeat == SteadyTime{} || r >= ranks.size() || ranks[r].exit) continue;
      // A save in progress may take long (rank 0 commits for everyone), but not forever.
      const Duration limit = st.saving ? cfg.hang_timeout + cfg.commit_timeout : cfg.hang_timeout;
      if (now - st.last_heartbeat < limit) continue;
      hang_detected = true;
      const std::string report = collect_hang_report(ranks[r].pid, ranks[r].pgid, 10s);
      const std::string path =
          join_path(join_path(cfg.run_dir, attempt_dir_name(attempt)), "hang-rank-" + std::to_string(r) + ".txt");
      (void)atomic_write_file(d.fs, path, report);
      events.write("hang", {{"attempt", attempt}, {"rank", uint64_t{r}}, {"step", st.step},
                            {"seconds_since_heartbeat", seconds(now - st.last_heartbeat)},
                            {"report", path}});
      spdlog::error("rank {} hung at step {} (no heartbeat for {}); report in {}", r, st.step,
                    format_duration(now - st.last_heartbeat), path);
      return begin_teardown("rank " + std::to_string(r) + " hung");
    }
  }

  Duration periodic_interval() {
    if (cfg.interval_mode == IntervalMode::kTime) return cfg.every;
    return policies::young_daly_interval(cost.estimate(10s),
                                         failure_rate.mtbf(d.clock.now(), cfg.mtbf));
  }

  void arm_periodic() {
    if (cfg.interval_mode == IntervalMode::kSteps) return;
    periodic_timer->arm(periodic_interval(), [this] {
      if (state != SupervisorState::kRunning || tearing_down) return;
      const uint64_t at = control->max_step() + step_margin();
      control->send_all(hooks::CheckpointNow{
          to_unix_ms(d.clock.wall_now() + cfg.commit_timeout), "periodic", at});
      events.write("checkpoint_request", {{"at_step", at}, {"reason", std::string("periodic")}});
      arm_periodic();
    });
  }

  // ---- end ------------------------------------------------------------------------------

  void fail_hard(const Error& e) {
    spdlog::error("{}", e.message());
    events.write("error", {{"message", e.message()}});
    finish(SupervisorState::kFailed, 1);
  }

  void finish(SupervisorState s, int code) {
    if (finished) return;
    state = s;
    finished = true;
    exit_code = code;
    for (auto* t : {tick.get(), backoff_timer.get(), deadline_timer.get(), drain_timer.get(),
                    periodic_timer.get()})
      if (t) t->cancel();
    if (control) control->stop();
    events.write("finish", {{"state", std::string(supervisor_state_name(s))},
                            {"exit_code", int64_t{code}}, {"attempts", attempt + 1}});
  }

  static constexpr int kExitPreemptedCode = 75;
  static constexpr int kExitGaveUpCode = 76;
};

Supervisor::Supervisor(SupervisorDeps deps, JobConfig config)
    : impl_(std::make_unique<Impl>(deps, std::move(config))) {}

Supervisor::~Supervisor() = default;

Status Supervisor::start() {
  Impl& m = *impl_;
  if (m.cfg.command.empty()) return Error(ErrorCode::kInvalid, "no command to run");
  if (m.cfg.nproc == 0) return Error(ErrorCode::kInvalid, "nproc must be at least 1");
  SG_RETURN_IF_ERROR(m.d.fs.create_dirs(m.cfg.run_dir));
  SG_RETURN_IF_ERROR(m.d.fs.create_dirs(m.cfg.checkpoint_dir));
  SG_ASSIGN_OR_RETURN(m.events, EventLog::open(join_path(m.cfg.run_dir, "events.jsonl"), m.d.clock));
  m.socket_path = control_socket_path(m.cfg.run_dir);
  hooks::ControlServerOptions o;
  o.socket_path = m.socket_path;
  Impl* p = impl_.get();
  o.events.on_heartbeat = [p](const hooks::RankStatus& r) { p->on_heartbeat(r); };
  o.events.on_hello = [p](const hooks::RankStatus& r) {
    p->events.write("hello", {{"attempt", p->attempt}, {"rank", uint64_t{r.rank}}, {"pid", r.pid}});
  };
  o.events.on_checkpoint_begin = [p](uint32_t, uint64_t step) {
    p->save_begin.try_emplace(step, p->d.clock.now());
  };
  o.events.on_committed = [p](uint32_t rank, uint64_t step, const std::string& manifest) {
    p->on_committed(rank, step, manifest);
  };
  o.events.on_failed = [p](uint32_t rank, uint64_t step, const std::string& error) {
    p->events.write("checkpoint_failed", {{"rank", uint64_t{rank}}, {"step", step}, {"error", error}});
    spdlog::error("rank {}: checkpoint of step {} failed: {}", rank, step, error);
  };
  o.events.on_protocol_error = [](const std::string& problem) {
    spdlog::warn("control socket: {}", problem);
  };
  m.control = std::make_unique<hooks::ControlServer>(m.d.loop, m.d.clock, std::move(o));
  SG_RETURN_IF_ERROR(m.control->start());
  hooks::Schedule schedule;
  if (m.cfg.interval_mode == IntervalMode::kSteps) schedule.every_steps = m.cfg.every_steps;
  m.control->set_schedule(schedule);
  m.tick = m.d.timers.make_timer();
  m.backoff_timer = m.d.timers.make_timer();
  m.deadline_timer = m.d.timers.make_timer();
  m.drain_timer = m.d.timers.make_timer();
  m.periodic_timer = m.d.timers.make_timer();
  m.attempt = m.first_attempt_number();
  m.run_start = m.d.clock.now();
  m.failure_rate.set_start(m.run_start);
  m.events.write("start", {{"job_id", m.cfg.job_id}, {"nproc", uint64_t{m.cfg.nproc}},
                           {"checkpoint_dir", m.cfg.checkpoint_dir}});
  m.launch_attempt();
  return {};
}

void Supervisor::request_stop(const StopRequest& request) { impl_->request_stop(request); }

void Supervisor::report_unhealthy(const std::string& evidence) {
  Impl& m = *impl_;
  if (m.finished || m.node_unhealthy) return;
  m.node_unhealthy = true;
  m.events.write("node_unhealthy", {{"attempt", m.attempt}, {"evidence", evidence}});
  spdlog::error("node unhealthy: {}", evidence);
  m.lifecycle("node_unhealthy", {{"evidence", evidence}});
  m.request_stop({"node-unhealthy", m.d.clock.wall_now() + m.cfg.grace, false});
}

void Supervisor::request_checkpoint(const std::string& reason) {
  Impl& m = *impl_;
  if (m.finished || m.state != SupervisorState::kRunning || m.tearing_down) return;
  const uint64_t at = m.control->max_step() + m.step_margin();
  // "advisory:" keeps it a plain save on the job side: the ranks do not stop after it.
  m.control->send_all(hooks::CheckpointNow{
      to_unix_ms(m.d.clock.wall_now() + m.cfg.commit_timeout), "advisory:" + reason, at});
  m.events.write("checkpoint_request", {{"at_step", at}, {"reason", reason}});
}

void Supervisor::set_on_lifecycle(
    std::function<void(std::string_view, std::map<std::string, std::string>)> cb) {
  impl_->on_lifecycle = std::move(cb);
}

void Supervisor::set_on_emergency_committed(std::function<void(uint64_t)> callback) {
  impl_->on_emergency_committed = std::move(callback);
}
bool Supervisor::finished() const { return impl_->finished; }
int Supervisor::exit_code() const { return impl_->exit_code; }
SupervisorState Supervisor::state() const { return impl_->state; }

std::string Supervisor::metrics_text() const {
  const Impl& m = *impl_;
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  line("# HELP shardguard_restarts_total Restarts by exit class.");
  line("# TYPE shardguard_restarts_total counter");
  for (const char* c : {"preempted", "infrastructure", "hang", "crash", "no_progress"}) {
    auto it = m.restarts.find(c);
    line(std::string("shardguard_restarts_total{class=\"") + c + "\"} " +
         std::to_string(it == m.restarts.end() ? 0 : it->second));
  }
  line("# TYPE shardguard_attempt gauge");
  line("shardguard_attempt " + std::to_string(m.attempt));
  line("# TYPE shardguard_last_committed_step gauge");
  line("shardguard_last_committed_step " + std::to_string(m.last_committed));
  line("# TYPE shardguard_lost_steps_total counter");
  line("shardguard_lost_steps_total " + std::to_string(m.lost_steps));
  line("# TYPE shardguard_checkpoint_seconds summary");
  line("shardguard_checkpoint_seconds_sum " + std::to_string(m.checkpoint_seconds));
  line("shardguard_checkpoint_seconds_count " + std::to_string(m.checkpoints));
  const Duration total = m.d.clock.now() - m.run_start;
  Duration running = m.running_time;
  if (m.state == SupervisorState::kRunning) running += m.d.clock.now() - m.attempt_start;
  line("# HELP shardguard_goodput_ratio Share of wall time with the ranks running.");
  line("# TYPE shardguard_goodput_ratio gauge");
  line("shardguard_goodput_ratio " +
       std::to_string(total.count() > 0 ? seconds(running) / seconds(total) : 0.0));
  return out;
}

}  // namespace shardguard::supervisor
