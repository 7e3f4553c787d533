#include "supervisor/node_runner.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/paths.h"
#include "core/log_limiter.h"
#include "core/units.h"
#include "hooks/control_server.h"
#include "io/event_loop.h"
#include "io/process_isolation.h"
#include "io/process_record.h"
#include "supervisor/hang_report.h"
#include "supervisor/node_claims.h"
#include "supervisor/rank_env.h"
#include "supervisor/rank_log_tail.h"
#include "supervisor/transfer_progress.h"

namespace shardguard::supervisor {
namespace {

using namespace std::chrono_literals;

hooks::RequestKind to_wire(CheckpointKind k) {
  switch (k) {
    case CheckpointKind::kEmergency: return hooks::RequestKind::kEmergency;
    case CheckpointKind::kPeriodic: return hooks::RequestKind::kPeriodic;
    case CheckpointKind::kAdvisory: return hooks::RequestKind::kAdvisory;
  }
  return hooks::RequestKind::kEmergency;
}

bool transient_errno(int e) { return e == EMFILE || e == ENFILE || e == EAGAIN || e == ENOMEM; }

// Slurm signals every process of a job at once, so each rank reports the same SIGTERM (and
// shardguard usually got it too): the reports of one signal within this window of the first
// make one notice, which the decision core counts once with shardguard's own (repeats count
// only 1 s apart). A rank reports within about 100 ms of the signal.
constexpr auto kRankSignalWindow = std::chrono::seconds(2);

}  // namespace

std::string attempt_dir(const std::string& run_dir, Epoch epoch) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "attempt-%03llu", static_cast<unsigned long long>(epoch));
  return join_path(run_dir, buf);
}

struct NodeRunner::Impl {
  io::Deps d;
  NodeRunnerOptions opt;
  JobLauncher& launcher;
  Report report;
  RecordFn record;
  std::unique_ptr<hooks::ControlServer> control;
  std::unique_ptr<Timer> term_timer, reap_timer;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);

  // The current epoch on this node.
  bool active = false;
  Epoch epoch = 0;
  NodeSlot slot;
  uint32_t world = 0;
  std::set<uint32_t> running;  // global ranks not yet exited
  std::set<uint32_t> hello;
  std::set<uint32_t> beating;  // ranks that sent a heartbeat in this epoch
  std::optional<command::Launch> pending_launch;  // waits for the previous epoch's destroy
  bool tearing_down = false;
  bool killing = false;
  int hang_reports_pending = 0;
  std::optional<command::CheckpointNow> request;
  std::map<std::string, SteadyTime> rank_signal_at;  // by signal name: the last notice's time

  Impl(const io::Deps& deps, NodeRunnerOptions o, JobLauncher& l, Report r, RecordFn rec)
      : d(deps),
        opt(std::move(o)),
        launcher(l),
        report(std::move(r)),
        record(std::move(rec)),
        store(d.checkpoints, d.fs, opt.config.checkpoint_dir),
        protocol_log(d.clock, {}, nullptr, &d.timers) {}

  storage::StoreRef store;  // where commits are read back from
  // Bad lines on the control socket are a neighbour's to send at will: a count past 10 a
  // second, not a line each (17.7 MB of junk had made 361,003 log lines).
  LogLimiter protocol_log;
  TransferProgress progress;  // of this node's ranks' long saves and resumes
  // Commits being read back, and the rank exits that wait for them: a rank that commits its
  // last step and exits at once must not end the attempt before its commit is known (in a
  // bucket the read-back takes a few requests; retention would remove the step as abandoned).
  int verifying = 0;
  std::vector<event::RankExited> held_exits;

  void release_exits() {
    if (verifying > 0) return;
    auto held = std::exchange(held_exits, {});
    for (auto& x : held) report(std::move(x));
  }

  bool mine(uint32_t rank) const {
    return active && rank >= slot.first_rank && rank < slot.first_rank + slot.nproc;
  }

  // ---- control socket ------------------------------------------------------------------

  Status admit(const hooks::Hello& h, std::optional<pid_t> peer_pid) const {
    if (!active || tearing_down) return Error(ErrorCode::kInvalid, "no attempt is running");
    if (h.job_id != opt.config.job_id)
      return Error(ErrorCode::kInvalid, "job '" + h.job_id + "' is not this job ('" +
                                            opt.config.job_id + "')");
    if (h.attempt != epoch)
      return Error(ErrorCode::kInvalid, "attempt " + std::to_string(h.attempt) +
                                            " is not the current one (" + std::to_string(epoch) + ")");
    if (!mine(h.rank) || h.world_size != world)
      return Error(ErrorCode::kInvalid, "rank " + std::to_string(h.rank) + " of " +
                                            std::to_string(h.world_size) +
                                            " is not a rank of this node in this attempt");
    // Bound to a process this node launched: a neighbour of the same uid cannot speak for a
    // rank (and so cannot take its checkpoint requests, or fake its steps and commits).
    if (peer_pid && !launcher.owns(h.rank, *peer_pid))
      return Error(ErrorCode::kInvalid, "process " + std::to_string(*peer_pid) +
                                            " is not rank " + std::to_string(h.rank) +
                                            "'s process or one of its descendants");
    return {};
  }

  hooks::ControlServerOptions control_options() {
    hooks::ControlServerOptions o;
    o.socket_path = opt.control_socket;
    o.admit = [this](const hooks::Hello& h, std::optional<pid_t> pid) { return admit(h, pid); };
    // Every rank's connection, a reconnection each, and a few for tools.
    o.max_connections = 2 * size_t{opt.config.nproc} + 8;
    auto& e = o.events;
    e.on_hello = [this](const hooks::RankStatus& r) {
      hello.insert(r.rank);
      report(event::RankHello{epoch, r.rank, r.pid});
      if (request && request->epoch == epoch) send_request_to(r.rank);
    };
    e.on_heartbeat = [this](const hooks::RankStatus& r, const StepScalars& scalars) {
      beating.insert(r.rank);
      report(event::Heartbeats{epoch, {{r.rank, r.step, scalars}}, std::nullopt});
    };
    e.on_checkpoint_begin = [this](uint32_t rank, uint64_t step) {
      report(event::SaveBegan{epoch, rank, step});
    };
    e.on_written = [this](uint32_t rank, uint64_t step) {
      report(event::ShardWritten{epoch, rank, step});
    };
    e.on_progress = [this](uint32_t rank, const hooks::Progress& p) {
      auto s = progress.report(rank, p, d.clock.now());
      if (!s) return;
      spdlog::info("{}", describe(*s));
      EventFields f{{"attempt", epoch},
                    {"phase", std::string(hooks::transfer_phase_name(s->phase))},
                    {"step", s->step},
                    {"done_bytes", s->done},
                    {"total_bytes", s->total},
                    {"bytes_per_second", s->bytes_per_second}};
      if (s->left) f.push_back({"seconds_left", std::chrono::duration<double>(*s->left).count()});
      record("transfer_progress", f);
    };
    e.on_committed = [this](uint32_t rank, uint64_t step, const std::string& claimed) {
      verify_commit(rank, step, claimed);
    };
    e.on_failed = [this](uint32_t rank, uint64_t step, const std::string& error) {
      const bool no_space = error.find("No space left") != std::string::npos ||
                            error.find("Disk quota") != std::string::npos;
      report(event::SaveFailed{epoch, rank, step, error, no_space});
    };
    e.on_passed = [this](uint32_t rank, uint64_t step) { report(event::Passed{epoch, rank, step}); };
    e.on_resume_failed = [this](uint32_t rank, const hooks::ResumeFailed& f) {
      report(event::ResumeFailed{epoch, rank, f.manifest, f.file, f.offset, f.error});
    };
    e.on_signal = [this](uint32_t rank, const std::string& name) { on_rank_signal(rank, name); };
    e.on_protocol_error = [this](const std::string& problem) {
      protocol_log.warn("control socket protocol error", "control socket: " + problem);
    };
    return o;
  }

  void arm_reaper() {
    reap_timer->arm(1s, [this] {
      io::reap_orphans();
      arm_reaper();
    });
  }

  // A SIGTERM that reached a rank came from outside (teardown never sends one): the same
  // notice as shardguard's own SIGTERM, with the job's grace.
  void on_rank_signal(uint32_t rank, const std::string& name) {
    const SteadyTime now = d.clock.now();
    auto it = rank_signal_at.find(name);
    const bool repeat = it != rank_signal_at.end() && now - it->second < kRankSignalWindow;
    record("rank_signal",
           {{"attempt", epoch}, {"rank", uint64_t{rank}}, {"signal", name}, {"notice", !repeat}});
    if (repeat) return;
    rank_signal_at[name] = now;
    spdlog::warn("rank {} received {}: a notice", rank, name);
    event::Notice n;
    n.node = opt.node;
    n.action = NoticeAction::kStop;
    n.source = "signal";
    for (char c : name) n.kind += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    n.detail = name + " received by rank " + std::to_string(rank);
    n.deadline = d.clock.wall_now() + opt.config.grace;
    n.preemption = true;
    report(n);
  }

  hooks::CheckpointNow wire(const command::CheckpointNow& c) const {
    return hooks::CheckpointNow{to_unix_ms(c.deadline), to_wire(c.kind), c.reason, c.at_step};
  }

  // The checkpoint signal goes only to a rank that has sent a heartbeat: one still starting
  // (its client said hello before init_process_group) would have the signal interrupt what it
  // is doing (torch's TCPStore connect fails with "Interrupted system call"). It reads the
  // request from its socket at its first call, as the signal would have told it to.
  void signal_checkpoint(uint32_t rank) {
    if (request->kind == CheckpointKind::kEmergency && opt.config.checkpoint_signal != 0 &&
        beating.contains(rank))
      launcher.signal(rank, opt.config.checkpoint_signal);
  }

  void send_request_to(uint32_t rank) {
    (void)control->send_to(rank, wire(*request));
    signal_checkpoint(rank);
  }

  // A commit is believed only once its manifest is read back and matches.
  void verify_commit(uint32_t rank, uint64_t step, const std::string& claimed) {
    if (rank != 0) {
      record("commit_claim_ignored", {{"rank", uint64_t{rank}}, {"step", step},
                                      {"why", std::string("only rank 0 commits")}});
      return;
    }
    const Epoch e = epoch;
    storage::Store& s = store.get();
    const std::string job = opt.config.job_id;
    std::weak_ptr<bool> weak = alive;
    ++verifying;
    run_off_loop<Result<event::Committed>>(
        d.worker,
        [&s, step, e, job]() { return read_back_commit(s, e, step, job); },
        [this, weak, step, claimed](Result<event::Committed> r) {
          if (weak.expired()) return;
          --verifying;
          if (!r.ok()) {
            spdlog::error("rank 0 claimed the commit of step {}, but {}", step, r.error().message());
            record("commit_claim_rejected",
                   {{"step", step}, {"manifest", claimed}, {"why", r.error().message()}});
          } else {
            report(*r);
          }
          release_exits();
        });
  }

  // ---- commands ------------------------------------------------------------------------

  void launch(const command::Launch& l) {
    const NodeSlot* mine_slot = nullptr;
    for (const auto& s : l.nodes)
      if (s.node == opt.node) mine_slot = &s;
    if (mine_slot == nullptr) return;  // not placed in this epoch
    if (active && epoch != l.epoch) {
      // The previous epoch is still here (a rejoining node gets the teardown of its stale
      // epoch and the new launch back to back): its ranks were told to stop; kill them now
      // and launch once they are gone, so that neither its term grace nor its destroy can
      // reach the new epoch.
      pending_launch = l;
      if (!killing) {
        killing = true;
        term_timer->cancel();
        destroy_epoch(epoch);
      }
      return;
    }
    control->reset_ranks();
    active = true;
    epoch = l.epoch;
    slot = *mine_slot;
    world = l.world_size;
    running.clear();
    hello.clear();
    beating.clear();
    tearing_down = killing = false;
    request.reset();
    const std::string dir = attempt_dir(opt.run_dir, epoch);
    if (auto st = d.fs.create_dirs(dir); !st.ok()) {
      report(event::LaunchFailed{epoch, opt.node, st.error().message(), transient_errno(st.error().sys_errno())});
      return;
    }
    RankEnvInputs in{opt.config, epoch, l.resume_manifest, control->socket_path()};
    in.world_size = l.world_size;
    in.local_world_size = slot.nproc;
    in.node_rank = slot.node_rank;
    in.nnodes = static_cast<uint32_t>(l.nodes.size());
    in.master_addr = l.master_addr;
    in.master_port = l.master_port;
    in.skip_batches = l.skip_batches;
    std::vector<RankLaunch> ranks;
    for (uint32_t local = 0; local < slot.nproc; ++local) {
      RankLaunch r;
      r.rank = slot.first_rank + local;
      r.local_rank = local;
      r.spec.argv = opt.config.command;
      r.spec.env = rank_environment(in, r.rank, local);
      r.spec.stdout_path = r.spec.stderr_path = rank_log_path(opt.run_dir, epoch, r.rank);
      ranks.push_back(std::move(r));
      running.insert(slot.first_rank + local);
    }
    const Epoch e = epoch;
    auto st = launcher.launch(e, std::move(ranks), [this, e](uint32_t rank, io::ExitStatus s) {
      on_exit(e, rank, s);
    });
    if (!st.ok()) {
      running.clear();
      active = false;
      report(event::LaunchFailed{e, opt.node, st.error().message(), transient_errno(st.error().sys_errno())});
      return;
    }
    spdlog::info("attempt {}: rank logs in {}/rank-*.log", e, dir);
    report(event::NodeLaunched{e, opt.node});
  }

  // A rank that failed before its first heartbeat usually says why in its log (a Python
  // traceback, a missing library): its last lines go to the console, bounded.
  void show_early_failure(uint32_t rank, const io::ExitStatus& s) {
    const std::string path = rank_log_path(opt.run_dir, epoch, rank);
    auto tail = rank_log_tail(d.fs, path);
    if (!tail.ok()) {
      spdlog::error("rank {} ({}) failed before its first heartbeat; its log: {}", rank,
                    s.describe(), tail.error().message());
      return;
    }
    spdlog::error("{}", format_rank_log_tail(rank, s.describe(), path, *tail));
  }

  void on_exit(Epoch e, uint32_t rank, io::ExitStatus s) {
    if (!active || e != epoch) return;
    running.erase(rank);
    const bool failed = s.signaled || s.code != 0;
    if (failed && !tearing_down && !beating.contains(rank)) show_early_failure(rank, s);
    event::RankExited x{e, rank, s.signaled, s.code, s.signal, tearing_down, s.describe()};
    if (verifying > 0)
      held_exits.push_back(std::move(x));
    else
      report(std::move(x));
    if (tearing_down && running.empty()) kill_now();
  }

  void tear_down(const command::TearDown& t) {
    if (!active || t.epoch != epoch) {
      // A launch still waiting for the previous epoch's destroy is called off.
      if (pending_launch && pending_launch->epoch == t.epoch) pending_launch.reset();
      const Epoch e = t.epoch;
      const NodeId node = opt.node;
      d.loop.post([r = report, e, node] { r(event::NodeStopped{e, node}); });
      return;
    }
    if (tearing_down) return;
    tearing_down = true;
    request.reset();
    // A client exits at once on `stop`, saving nothing; whatever is left is killed after the
    // term grace. Never SIGTERM: from outside, that means a notice.
    // In an emergency, the notice's deadline ends the grace if it comes first: the machine
    // goes then, and a rank still there must not outlive its supervisor's word.
    Duration grace = opt.config.term_grace;
    if (t.kill_by) {
      const auto left = std::chrono::duration_cast<Duration>(*t.kill_by - d.clock.wall_now());
      if (left < grace) {
        grace = std::max(Duration{0}, left);
        spdlog::info("teardown: ranks left are killed in {} (at the notice's deadline), not "
                     "after the {} term grace", format_duration(grace),
                     format_duration(opt.config.term_grace));
      }
    }
    control->send_all(hooks::Stop{to_unix_ms(d.clock.wall_now() + grace)});
    if (running.empty()) return kill_now();
    term_timer->arm(grace, [this] { kill_now(); });
  }

  void kill_now() {
    if (killing || hang_reports_pending > 0) return;  // a report being taken finishes first
    killing = true;
    term_timer->cancel();
    destroy_epoch(epoch);
  }

  // Kills epoch `e`'s processes; once they are gone the coordinator hears NodeStopped{e}. The
  // node goes idle only if no newer epoch was launched meanwhile.
  void destroy_epoch(Epoch e) {
    std::weak_ptr<bool> weak = alive;
    launcher.destroy(e, [this, weak, e] {
      if (weak.expired()) return;
      if (e == epoch) {
        control->reset_ranks();
        active = false;
      }
      report(event::NodeStopped{e, opt.node});
      if (pending_launch && !active) {
        const command::Launch next = std::move(*pending_launch);
        pending_launch.reset();
        launch(next);
      }
    });
  }

  void checkpoint_now(const command::CheckpointNow& c) {
    if (!active || c.epoch != epoch || tearing_down) return;
    request = c;
    control->send_all(wire(c));
    for (uint32_t rank : hello) signal_checkpoint(rank);
  }

  void collect_hang_report(const command::CollectHangReport& c) {
    if (!active || c.epoch != epoch || !mine(c.rank)) return;
    auto pid = launcher.pid_of(c.rank);
    auto pgid = launcher.group_of(c.rank);
    if (!pid || !pgid) return;
    ++hang_reports_pending;
    const std::string path =
        join_path(attempt_dir(opt.run_dir, epoch), "hang-rank-" + std::to_string(c.rank) + ".txt");
    Filesystem& fs = d.fs;
    std::weak_ptr<bool> weak = alive;
    const Epoch e = epoch;
    const uint32_t rank = c.rank;
    run_off_loop<Status>(
        d.worker,
        [&fs, path, pid = *pid, pgid = *pgid] {
          return atomic_write_file(fs, path, supervisor::collect_hang_report(pid, pgid, 10s));
        },
        [this, weak, path, e, rank](Status st) {
          if (weak.expired()) return;
          --hang_reports_pending;
          if (!st.ok()) spdlog::warn("hang report: {}", st.error().message());
          record("hang_report", {{"attempt", e}, {"rank", uint64_t{rank}}, {"report", path}});
          spdlog::error("rank {}: what it was doing is in {}", rank, path);
          if (tearing_down && (running.empty() || !term_timer->armed())) kill_now();
        });
  }
};

NodeRunner::NodeRunner(const io::Deps& deps, NodeRunnerOptions options, JobLauncher& launcher,
                       Report report, RecordFn record)
    : impl_(std::make_unique<Impl>(deps, std::move(options), launcher, std::move(report),
                                   std::move(record))) {
  impl_->control = std::make_unique<hooks::ControlServer>(deps.loop, deps.clock, impl_->control_options());
  hooks::Schedule schedule;
  if (impl_->opt.config.interval_mode == IntervalMode::kSteps)
    schedule.every_steps = impl_->opt.config.every_steps;
  impl_->control->set_schedule(schedule);
  impl_->term_timer = deps.timers.make_timer();
}

NodeRunner::~NodeRunner() {
  *impl_->alive = false;
  impl_->alive.reset();
}

Status NodeRunner::start() {
  Impl& m = *impl_;
  spdlog::info("process isolation: {}", io::probe_isolation().describe());
  // Leftovers of a run that was killed outright (no PID namespace took them along).
  const std::string record = process_record_path(m.opt.run_dir);
  if (auto swept = io::sweep_recorded(record); swept.ok() && swept->killed > 0)
    spdlog::warn("killed {} leftover process(es) of an earlier run", swept->killed);
  // Orphans that a rank's descendants left behind come back to this subreaper: reap them.
  m.reap_timer = m.d.timers.make_timer();
  m.arm_reaper();
  return m.control->start();
}

std::string process_record_path(const std::string& run_dir) { return join_path(run_dir, "processes"); }

void NodeRunner::apply(const Command& c) {
  Impl& m = *impl_;
  if (auto* l = std::get_if<command::Launch>(&c)) return m.launch(*l);
  if (auto* t = std::get_if<command::TearDown>(&c)) return m.tear_down(*t);
  if (auto* n = std::get_if<command::CheckpointNow>(&c)) return m.checkpoint_now(*n);
  if (auto* a = std::get_if<command::AbortSave>(&c)) {
    if (m.active && a->epoch == m.epoch) m.control->send_all(hooks::AbortSave{a->step, a->why});
    return;
  }
  // The committer is global rank 0, on the node whose slot starts there.
  if (auto* w = std::get_if<command::AllWritten>(&c)) {
    if (m.active && w->epoch == m.epoch && m.mine(0))
      (void)m.control->send_to(0, hooks::AllWritten{w->step});
    return;
  }
  if (auto* s = std::get_if<command::SaveCommitted>(&c)) {
    m.progress.reset();
    if (m.active && s->epoch == m.epoch)
      m.control->send_all(hooks::Committed{s->step, s->manifest});
    return;
  }
  if (auto* h = std::get_if<command::CollectHangReport>(&c)) return m.collect_hang_report(*h);
}

void NodeRunner::set_node(NodeId node) { impl_->opt.node = node; }
void NodeRunner::set_job_id(const std::string& job_id) { impl_->opt.config.job_id = job_id; }
void NodeRunner::set_report(Report report) { impl_->report = std::move(report); }
NodeId NodeRunner::node() const { return impl_->opt.node; }
std::optional<Epoch> NodeRunner::running_epoch() const {
  if (!impl_->active) return std::nullopt;
  return impl_->epoch;
}

void NodeRunner::stop() {
  Impl& m = *impl_;
  m.term_timer->cancel();
  if (m.reap_timer) m.reap_timer->cancel();
  m.control->stop();
}

}  // namespace shardguard::supervisor
