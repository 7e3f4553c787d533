#include "supervisor/supervisor.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <deque>

#include "checkpoint/catalog.h"
#include "checkpoint/paths.h"
#include "core/exit_codes.h"
#include "core/overload.h"
#include "core/units.h"
#include "io/event_loop.h"
#include "supervisor/attempt_machine.h"
#include "supervisor/directory_keeper.h"
#include "supervisor/event_log.h"
#include "supervisor/local_launcher.h"
#include "supervisor/machine_config.h"
#include "supervisor/machine_metrics.h"
#include "supervisor/node_claims.h"
#include "supervisor/node_runner.h"
#include "supervisor/rank_env.h"
#include "supervisor/resume_plan.h"
#include "supervisor/timeline.h"

namespace shardguard::supervisor {
struct Supervisor::Impl {
  io::Deps d;
  JobConfig cfg;
  SupervisorOptions opt;
  std::optional<WallTime> emergency_deadline;  // of the last emergency checkpoint asked for
  storage::StoreRef store;  // where the job's checkpoints live
  AttemptMachine machine;
  RemoteNodeEvents remote_events;  // what the other nodes say, checked
  EventLog events;
  // The same records, understood: goodput for the metrics, as `status` computes it.
  Timeline timeline{TimelineOptions{{}, false}};
  std::unique_ptr<DirectoryKeeper> keeper;
  bool committed_this_run = false;
  std::unique_ptr<LocalLauncher> launcher;
  std::unique_ptr<NodeRunner> own_node;  // this process's node, when the shell made it
  NodeRunner* node = nullptr;            // this process's node, when it has one
  // Node commands wait, in order, behind a coordinator record being written and behind space
  // being freed for an emergency save (make_room_then_ask).
  bool log_pending = false;
  bool room_pending = false;
  std::unique_ptr<Timer> room_timer;
  std::deque<Command> held;
  std::map<NodeId, std::function<void(const Command&)>> remote;  // the others
  std::function<void(int, const std::string&)> on_finish;
  std::array<std::unique_ptr<Timer>, kTimerCount> timers;
  std::map<uint64_t, agent::Notice> notices;  // by id, to acknowledge
  uint64_t next_notice_id = 1;
  std::function<void(std::string_view, std::map<std::string, std::string>)> on_lifecycle;
  std::function<void(const agent::Notice&)> on_acknowledge;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);

  // Events are handled one at a time: one that arrives while commands run waits its turn.
  std::deque<Event> queue;
  bool feeding = false;

  Impl(const io::Deps& deps, JobConfig c, SupervisorOptions o)
      : d(deps),
        cfg(std::move(c)),
        opt(std::move(o)),
        store(d.checkpoints, d.fs, cfg.checkpoint_dir),
        machine(config_of(cfg, opt), d.random.as_function()),
        remote_events(
            d.worker, store.get(), cfg.job_id, machine, d.clock, d.timers,
            [this](Event e) { feed(std::move(e)); },
            [this](std::string_view type, const EventFields& f) { record(type, f); }) {}

  static MachineConfig config_of(const JobConfig& cfg, const SupervisorOptions& o) {
    MachineConfig m = machine_config(cfg);
    m.min_nodes = o.min_nodes;
    m.max_nodes = o.max_nodes;
    m.join_window = o.join_window;
    return m;
  }

  // A command for the nodes goes to every node; each takes its own part. It waits while a
  // coordinator record is being written, so that nothing overtakes a launch, and while space
  // is freed for an emergency save.
  void to_nodes(const Command& c) {
    if (log_pending || room_pending) return held.push_back(c);
    if (node) node->apply(c);
    for (auto& [id, send] : remote) send(c);
  }

  // What the coordinator's record says now (a successor adopts the job from it).
  CoordinatorState coordinator_state() const {
    CoordinatorState state = machine.snapshot(now());
    state.job_id = cfg.job_id;
    state.coordinator_address = opt.coordinator_address;
    if (node) state.coordinator_node = opt.local_node_id;
    return state;
  }

  // Multi-node: the decision is on disk before any node acts on it (a successor reads it).
  void log_then_launch(const command::Launch& l) {
    if (!opt.write_coordinator_log) return to_nodes(l);
    CoordinatorState state = coordinator_state();
    log_pending = true;
    held.push_back(l);  // held until the record is written
    std::weak_ptr<bool> weak = alive;
    storage::Store& s = store.get();
    run_off_loop<Status>(
        d.worker,
        [&s, state, at = d.clock.wall_now()] { return store_coordinator_state(s, state, at); },
        [this, weak](Status st) {
          if (weak.expired()) return;
          if (!st.ok()) spdlog::error("coordinator record: {}; launching anyway", st.error().message());
          log_pending = false;
          flush_held();
        });
  }

  void flush_held() {
    if (log_pending || room_pending) return;
    std::deque<Command> queue;
    queue.swap(held);
    for (auto& c : queue) to_nodes(c);
  }

  // Before an emergency save on a nearly full disk: the ranks are asked for it once the
  // space is free, so that their writes do not start before the removals end and fail for
  // lack of space; if freeing takes longer than a quarter of the time left (at most 10 s),
  // they are asked anyway.
  void make_room_then_ask(WallTime deadline) {
    if (room_pending) return;  // already freeing; the request waits in line
    room_pending = true;
    std::weak_ptr<bool> weak = alive;
    auto release = [this, weak](bool in_time) {
      if (weak.expired() || !room_pending) return;
      if (!in_time) spdlog::warn("freeing space is taking long: asking for the checkpoint anyway");
      room_pending = false;
      room_timer->cancel();
      flush_held();
    };
    const Duration left = std::chrono::duration_cast<Duration>(deadline - d.clock.wall_now());
    room_timer->arm(std::clamp(left / 4, Duration{0}, Duration{std::chrono::seconds(10)}),
                    [release] { release(false); });
    keeper->make_room([release] { release(true); });
  }

  // The record follows what nodes and commits change, without holding anything up.
  void log_state() {
    if (!opt.write_coordinator_log || finished_logged) return;
    CoordinatorState state = coordinator_state();
    storage::Store& s = store.get();
    d.worker.submit(
        [&s, state, at = d.clock.wall_now()] {
          if (auto st = store_coordinator_state(s, state, at); !st.ok())
            spdlog::warn("coordinator record: {}", st.error().message());
        },
        [] {});
  }
  bool finished_logged = false;

  Now now() const { return Now{d.clock.now(), d.clock.wall_now()}; }

  void record(std::string_view type, const EventFields& fields) {
    events.write(type, fields);
    timeline.add(to_unix_ms(d.clock.wall_now()), type, fields);
  }

  void feed(Event e) {
    queue.push_back(std::move(e));
    if (feeding) return;
    feeding = true;
    while (!queue.empty()) {
      Event next = std::move(queue.front());
      queue.pop_front();
      observe(next);
      execute(machine.handle(now(), next));
      // A notice too: a successor takes the emergency over from the record (fault n2).
      if (std::holds_alternative<event::Committed>(next) ||
          std::holds_alternative<event::NodeJoined>(next) ||
          std::holds_alternative<event::NodeLost>(next) ||
          std::holds_alternative<event::Notice>(next) ||
          std::holds_alternative<event::NodeUnhealthy>(next))
        log_state();
    }
    feeding = false;
  }

  // What the directory's bookkeeping needs to know of an event.
  void observe(const Event& e) {
    if (auto* b = std::get_if<event::SaveBegan>(&e)) keeper->on_save_started(b->step);
    if (auto* c = std::get_if<event::Committed>(&e)) {
      committed_this_run = true;
      keeper->on_committed(c->step, c->bytes);
    }
    if (auto* f = std::get_if<event::SaveFailed>(&e)) {
      spdlog::warn("attempt {}: checkpoint of step {} failed on rank {}: {}", f->epoch, f->step,
                   f->rank, f->error);
      keeper->on_save_failed(f->step, f->no_space);
    }
  }

  void execute(const Commands& commands) {
    for (const auto& c : commands) {
      std::visit(
          Overload{
              [&](const command::FindResume& f) { find_resume(f); },
              [&](const command::Launch& l) {
                spdlog::info("attempt {}: launching {} rank(s), {}", l.epoch, l.world_size,
                             l.resume_step ? "resuming from step " + std::to_string(*l.resume_step)
                                           : std::string("fresh start"));
                keeper->on_launch(l.epoch, l.resume_step);
                log_then_launch(l);
              },
              [&](const command::TearDown& t) {
                spdlog::info("attempt {}: teardown: {}", t.epoch, t.why);
                to_nodes(t);
              },
              [&](const command::CheckpointNow& n) {
                if (n.kind == CheckpointKind::kEmergency) {
                  emergency_deadline = n.deadline;
                  spdlog::warn("emergency checkpoint of step {} requested ({}), {} left",
                               n.at_step, n.reason, format_duration(n.deadline - d.clock.wall_now()));
                  make_room_then_ask(n.deadline);
                }
                to_nodes(n);
              },
              [&](const command::AbortSave& a) { to_nodes(a); },
              [&](const command::AllWritten& a) { to_nodes(a); },
              [&](const command::SaveCommitted& a) { to_nodes(a); },
              [&](const command::CollectHangReport& h) { to_nodes(h); },
              [&](const command::ArmTimer& a) { arm(a); },
              [&](const command::CancelTimer& x) { timers[static_cast<size_t>(x.id)]->cancel(); },
              [&](const command::Record& r) {
                record(r.type, r.fields);
                if (r.type == "attempt_end") keeper->on_attempt_ended(r.fields);
                if (r.type == "save_window")
                  spdlog::warn("{}", field_value<std::string>(r.fields, "warning").value_or(""));
                if (r.type == "fallback_checkpoint")
                  if (auto step = field_value<uint64_t>(r.fields, "step")) keeper->on_fallback_tried(*step);
              },
              [&](const command::Hook& h) {
                auto fields = h.fields;
                fields["job_id"] = cfg.job_id;
                fields["attempt"] = std::to_string(machine.epoch());
                if (on_lifecycle) on_lifecycle(h.event, std::move(fields));
              },
              [&](const command::Release& r) {
                // The coordinator's own node stays: the job still needs its coordinator.
                if (node && r.node == opt.local_node_id) {
                  spdlog::warn("node {} (this one) leaves the job ({}); it stays as the coordinator",
                               r.node, r.why);
                  return;
                }
                for (auto& [id, send] : remote)
                  if (id == r.node) send(r);
              },
              [&](const command::AckNotice& a) {
                auto it = notices.find(a.notice_id);
                if (it != notices.end() && on_acknowledge) on_acknowledge(it->second);
                // A notice of another node: that node acknowledges it.
                if (it == notices.end()) for (auto& [id, send] : remote) send(a);
              },
              [&](const command::Quarantine& q) { quarantine(q); },
              [&](const command::QuarantineFrom& q) { quarantine_from(q); },
              [&](const command::Finish& f) { finish(f); },
          },
          c);
    }
  }

  void arm(const command::ArmTimer& a) {
    const Duration after = std::max(Duration{0}, a.at - d.clock.now());
    const TimerId id = a.id;
    timers[static_cast<size_t>(id)]->arm(after, [this, id] { feed(event::TimerFired{id}); });
  }

  // The newest complete checkpoint not skipped, verified on the worker (checksums may read
  // hundreds of GB): the loop stays free to hear a notice meanwhile.
  void find_resume(const command::FindResume& f) {
    const auto verify = cfg.resume_verify == VerifyMode::kChecksum ? checkpoint::Verify::kChecksum
                                                                   : checkpoint::Verify::kSize;
    storage::Store& s = store.get();
    const std::vector<uint64_t> skip = f.skip_steps;
    const std::optional<uint64_t> skip_from = f.skip_from;
    const Epoch epoch = f.epoch;
    std::weak_ptr<bool> weak = alive;
    run_off_loop<ResumeChoice>(
        d.worker,
        [&s, verify, skip, skip_from] { return choose_resume(s, verify, skip, skip_from); },
        [this, weak, epoch](ResumeChoice r) {
          if (weak.expired()) return;
          if (!r.error.empty()) spdlog::warn("resume: {}", r.error);
          for (const auto& e : r.skipped) {
            record("resume_skipped", {{"step", e.step},
                                      {"state", std::string(checkpoint_state_name(e.state))},
                                      {"why", e.reason}});
            spdlog::warn("resume: skipping step {}: {}", e.step, e.reason);
          }
          feed(resume_found(epoch, r));
        });
  }

  // Sets a checkpoint that failed verification aside, so that nothing resumes from it again.
  void quarantine(const command::Quarantine& q) {
    std::weak_ptr<bool> weak = alive;
    keeper->quarantine(q.step, q.reason, [this, weak, q](Result<std::string> r) {
      if (weak.expired()) return;
      quarantined(r.ok() ? QuarantineOutcome{q.step, *r, ""}
                         : QuarantineOutcome{q.step, "", r.error().message()},
                  q.reason);
    });
  }

  // The divergence guard's rollback: every checkpoint from the anomaly on is set aside.
  void quarantine_from(const command::QuarantineFrom& q) {
    std::weak_ptr<bool> weak = alive;
    keeper->quarantine_from(q.from_step, q.reason, [this, weak, q](std::vector<QuarantineOutcome> r) {
      if (weak.expired()) return;
      if (r.empty()) spdlog::warn("divergence guard: no checkpoint of step {} or later to set aside", q.from_step);
      for (const auto& o : r) quarantined(o, q.reason);
    });
  }

  void quarantined(const QuarantineOutcome& o, const std::string& reason) {
    if (!o.error.empty()) {
      spdlog::error("quarantine of step {}: {}", o.step, o.error);
      record("quarantine_failed", {{"step", o.step}, {"error", o.error}});
      return;
    }
    spdlog::error("checkpoint of step {} set aside in {}: {}", o.step, o.path, reason);
    record("quarantined", {{"step", o.step}, {"path", o.path}, {"reason", reason}});
  }

  void finish(const command::Finish& f) {
    const char* what = f.state == command::FinalState::kSucceeded ? "finished" : "stopped";
    if (f.state == command::FinalState::kSucceeded)
      spdlog::info("job {}: {} (exit {})", what, f.summary, f.exit_code);
    else
      spdlog::warn("job {}: {} (exit {})", what, f.summary, f.exit_code);
    if (node) node->stop();
    if (opt.write_coordinator_log) {
      // The job is over: nothing runs for a successor to adopt.
      CoordinatorState state = coordinator_state();
      state.running = false;
      (void)store_coordinator_state(store.get(), state, d.clock.wall_now());
      finished_logged = true;
    }
    keeper->close(f.exit_code == kExitPreempted, committed_this_run);
    if (on_finish) on_finish(f.exit_code, f.summary);
  }
};

Supervisor::Supervisor(const io::Deps& deps, JobConfig config, SupervisorOptions options)
    : impl_(std::make_unique<Impl>(deps, std::move(config), std::move(options))) {}

Supervisor::~Supervisor() {
  *impl_->alive = false;
  impl_->alive.reset();
}

Status Supervisor::start() {
  Impl& m = *impl_;
  if (m.opt.local_node && m.cfg.command.empty())
    return Error(ErrorCode::kInvalid, "no command to run");
  if (m.cfg.nproc == 0) return Error(ErrorCode::kInvalid, "nproc must be at least 1");
  SG_RETURN_IF_ERROR(m.d.fs.create_dirs(m.cfg.run_dir));
  if (m.store->as_directory() != nullptr)
    SG_RETURN_IF_ERROR(m.d.fs.create_dirs(m.cfg.checkpoint_dir));
  SG_ASSIGN_OR_RETURN(m.events, EventLog::open(join_path(m.cfg.run_dir, "events.jsonl"), m.d.clock));
  for (auto& t : m.timers) t = m.d.timers.make_timer();
  m.room_timer = m.d.timers.make_timer();
  // Earlier runs in this run dir: attempt numbers, the last save's time, the goodput.
  const std::string past = m.d.fs.read_file(m.events.path()).value_or("");
  const auto past_records = parse_events(past);
  m.timeline.add_lines(past);  // they count towards the goodput, as `status` counts them
  const Epoch first = first_epoch(m.store.get(), past_records);
  // One job per checkpoint location: its lease, its job id, its history.
  m.keeper = std::make_unique<DirectoryKeeper>(m.d, m.cfg, m.store.get());
  SG_ASSIGN_OR_RETURN(
      m.cfg.job_id,
      m.keeper->open(m.cfg.job_id.empty() ? std::nullopt : std::optional(m.cfg.job_id),
                     m.cfg.resume_from_job, first));
  Impl* p = impl_.get();
  m.keeper->set_on_lost([p](const std::string& why) {
    p->feed(event::Abort{"the checkpoint directory was taken over: " + why, kExitConfig});
  });
  m.keeper->set_on_never_fits([p](const std::string& why) {
    p->feed(event::Abort{"requeueing will not help: " + why, kExitConfig});
  });
  if (m.opt.existing_node) {
    m.node = m.opt.existing_node;
    m.node->set_report([p](Event e) { p->feed(std::move(e)); });
    m.node->set_job_id(m.cfg.job_id);
  } else if (m.opt.local_node) {
    m.launcher = std::make_unique<LocalLauncher>(m.d.loop, m.d.launcher,
                                                 process_record_path(m.cfg.run_dir));
    NodeRunnerOptions o;
    o.node = m.opt.local_node_id;
    o.config = m.cfg;
    o.control_socket = control_socket_path(m.cfg.run_dir);
    o.run_dir = m.cfg.run_dir;
    m.own_node = std::make_unique<NodeRunner>(
        m.d, std::move(o), *m.launcher, [p](Event e) { p->feed(std::move(e)); },
        [p](std::string_view type, EventFields fields) { p->record(type, fields); });
    m.node = m.own_node.get();
    SG_RETURN_IF_ERROR(m.node->start());
  }
  m.record("start", {{"job_id", m.cfg.job_id}, {"nproc", uint64_t{m.cfg.nproc}},
                           {"checkpoint_dir", m.cfg.checkpoint_dir}, {"first_attempt", first}});
  if (m.cfg.resume_from_step || m.cfg.resume_from_none) {
    std::string steps;
    for (uint64_t s : m.keeper->rolled_back()) steps += (steps.empty() ? "" : ",") + std::to_string(s);
    EventFields f{{"quarantined", steps}};
    if (m.cfg.resume_from_step) f.push_back({"to_step", *m.cfg.resume_from_step});
    else f.push_back({"fresh", true});
    m.record("rollback", f);
  }
  m.feeding = true;  // the start's commands run before the first event
  // The loop breaker continues the counts of earlier runs on this directory.
  m.machine.seed_loop_breaker(m.keeper->history().failed_resumes,
                              m.keeper->history().fallback_tried);
  // Does the emergency save fit? Known at start when an earlier run here committed one.
  if (auto last = last_save_time(past_records)) m.machine.seed_save_time(*last);
  if (m.opt.adopt) {
    const CoordinatorState& state = *m.opt.adopt;
    spdlog::warn("taking over job '{}' at attempt {} from the coordinator's record", m.cfg.job_id,
                 state.epoch);
    m.execute(m.machine.adopt(m.now(), state));
  } else {
    m.execute(m.machine.start(m.now(), first));
  }
  m.feeding = false;
  if (m.opt.local_node || m.opt.existing_node)
    m.feed(event::NodeJoined{m.opt.local_node_id,
                             m.opt.local_address.empty() ? m.cfg.master_addr : m.opt.local_address});
  return {};
}

void Supervisor::add_node(NodeId node, const std::string& address,
                          std::function<void(const Command&)> send, std::optional<Epoch> running) {
  Impl& m = *impl_;
  if (running && !m.machine.runs_on(node, *running)) {
    spdlog::warn("node {} still runs ranks of attempt {}: stopping them", node, *running);
    send(command::TearDown{*running, "a stale attempt on a rejoining node"});
  }
  m.remote[node] = std::move(send);
  m.feed(event::NodeJoined{node, address});
}

void Supervisor::remove_node(NodeId node, const std::string& why) {
  impl_->remote.erase(node);
  impl_->feed(event::NodeLost{node, why});
}

void Supervisor::node_event(NodeId node, Event event) {
  impl_->remote_events.on_event(node, std::move(event));
}

void Supervisor::set_on_finish(std::function<void(int, const std::string&)> cb) {
  impl_->on_finish = std::move(cb);
}

void Supervisor::notice(const agent::Notice& n) {
  Impl& m = *impl_;
  event::Notice e;
  e.node = m.opt.local_node_id;
  e.action = n.is_preemption ? NoticeAction::kStop : NoticeAction::kCheckpoint;
  e.source = n.source;
  e.kind = n.kind;
  e.detail = n.detail;
  e.deadline = n.deadline;
  e.preemption = n.is_preemption && n.source != "drain";
  e.id = (uint64_t{m.opt.local_node_id} << 32) | m.next_notice_id++;
  m.notices[e.id] = n;
  spdlog::warn("notice from {}: {} ({} left)", n.source, n.kind,
               format_duration(n.deadline - m.d.clock.wall_now()));
  m.feed(e);
}

void Supervisor::report_unhealthy(const std::string& evidence) {
  Impl& m = *impl_;
  spdlog::error("node unhealthy: {}", evidence);
  m.feed(event::NodeUnhealthy{m.opt.local_node_id, evidence, m.d.clock.wall_now() + m.cfg.grace});
}

void Supervisor::set_on_lifecycle(
    std::function<void(std::string_view, std::map<std::string, std::string>)> cb) {
  impl_->on_lifecycle = std::move(cb);
}

void Supervisor::set_on_acknowledge(std::function<void(const agent::Notice&)> cb) {
  impl_->on_acknowledge = std::move(cb);
}

const std::string& Supervisor::job_id() const { return impl_->cfg.job_id; }
bool Supervisor::finished() const { return impl_->machine.finished(); }
int Supervisor::exit_code() const { return impl_->machine.exit_code(); }
std::string Supervisor::state() const { return std::string(phase_name(impl_->machine.phase())); }
std::optional<WallTime> Supervisor::emergency_deadline() const { return impl_->emergency_deadline; }

std::string Supervisor::metrics_text() const {
  const Impl& m = *impl_;
  return machine_metrics(m.machine.stats(m.now())) +
         goodput_metrics(m.timeline.goodput(to_unix_ms(m.d.clock.wall_now())));
}

}  // namespace shardguard::supervisor
