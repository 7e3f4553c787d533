#include "cli/slurm_integration.h"
#include "core/host_name.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <vector>

#include "agent/signal_source.h"
#include "agent/slurm_policy.h"
#include "agent/slurm_scontrol.h"
#include "core/filesystem.h"
#include "io/event_loop.h"
#include "supervisor/event_log.h"

namespace shardguard::cli {
namespace {

using namespace std::chrono_literals;

// How long the end waits for reads still running (each is bounded by the adapter's timeout).
constexpr auto kReadsSettle = 15s;

std::string host_name() { return shardguard::host_name("localhost"); }

}  // namespace

struct SlurmIntegration::Impl {
  const io::Deps& d;
  SlurmRole role;
  std::optional<agent::SlurmJobEnv> job;
  agent::Scontrol scontrol;
  supervisor::EventLog events;
  std::vector<agent::SlurmStopSeen> stops;
  std::vector<size_t> waiting;  // stops whose state is not read yet
  bool reading = false;
  // The node (the decision core's id) that failed a health check; 0 is this one on one node.
  std::optional<uint32_t> unhealthy_node;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);

  Impl(const io::Deps& deps, SlurmRole r, agent::CommandRunner runner)
      : d(deps), role(r), scontrol(std::move(runner)) {}
  ~Impl() { *alive = false; }

  std::string node() const { return job && !job->node.empty() ? job->node : host_name(); }

  // The Slurm name of node `id`: under srun a node's id is its SLURM_NODEID, the index of its
  // host in the job's node list. Blocks (scontrol show hostnames) for another node's name.
  std::string node_name(uint32_t id) const {
    if (id == job->node_id.value_or(0)) return node();
    auto hosts = scontrol.hostnames(job->job_nodes);
    if (hosts.ok() && id < hosts->size()) return (*hosts)[id];
    spdlog::warn("slurm: no host for node {} in SLURM_JOB_NODELIST='{}'{}", id, job->job_nodes,
                 hosts.ok() ? "" : ": " + hosts.error().message());
    return "";
  }

  // One read at a time: the notices of one stop come in bursts (Slurm signals shardguard and
  // every rank at once), and one answer serves every notice that waited for it.
  void read_state() {
    if (reading || waiting.empty()) return;
    reading = true;
    std::vector<size_t> batch;
    batch.swap(waiting);
    const agent::Scontrol sc = scontrol;
    const uint32_t id = job->job_id;
    std::weak_ptr<bool> weak = alive;
    run_off_loop<Result<agent::SlurmJobState>>(
        d.worker, [sc, id] { return sc.show_job(id); },
        [this, weak, batch](Result<agent::SlurmJobState> r) {
          if (weak.expired()) return;
          reading = false;
          for (size_t i : batch) {
            if (r.ok()) stops[i].job = *r;
            if (r.ok())
              events.write("slurm_state", {{"notice", stops[i].notice},
                                           {"state", r->state},
                                           {"reason", r->reason},
                                           {"restarts", uint64_t{r->restarts}},
                                           {"preempting", r->preempting},
                                           {"requeueable", r->requeueable}});
            else
              events.write("slurm_state",
                           {{"notice", stops[i].notice}, {"error", r.error().message()}});
          }
          if (r.ok())
            spdlog::info("slurm: job {} is {} (Reason={}, Restarts={}{})", r->job_id, r->state,
                         r->reason, r->restarts, r->preempting ? ", preempted" : "");
          else
            spdlog::warn("slurm: cannot read the job's state: {}", r.error().message());
          read_state();
        });
  }

  Result<agent::SlurmJobState> read_at_end() {
    auto r = scontrol.show_job(job->job_id);
    if (r.ok())
      events.write("slurm_state", {{"notice", std::string("(the run ended)")},
                                   {"state", r->state},
                                   {"reason", r->reason},
                                   {"restarts", uint64_t{r->restarts}},
                                   {"preempting", r->preempting},
                                   {"requeueable", r->requeueable}});
    else
      spdlog::warn("slurm: cannot read the job's state: {}", r.error().message());
    return r;
  }

  // The requeue, then the excluded node. Slurm signals every process of the job at once,
  // this one too: SIGTERM is ignored from here on (the run is over).
  void act(const agent::SlurmRequeueDecision& dec, const std::optional<agent::SlurmJobState>& end) {
    if (dec.requeue) {
      ::signal(SIGTERM, SIG_IGN);
      Status st = scontrol.requeue(job->job_id);
      events.write("slurm_requeue", {{"job", uint64_t{job->job_id}},
                                     {"ok", st.ok()},
                                     {"error", st.ok() ? std::string() : st.error().message()}});
      if (st.ok()) {
        spdlog::warn("slurm: job {} requeued (scontrol requeue)", job->job_id);
      } else {
        spdlog::error("slurm: {}", st.error().message());
        return;
      }
    }
    if (dec.exclude_node.empty()) return;
    const std::string list = agent::add_excluded_node(end ? end->exc_nodes : "", dec.exclude_node);
    Status st = scontrol.set_excluded_nodes(job->job_id, list);
    events.write("slurm_exclude", {{"job", uint64_t{job->job_id}},
                                   {"exc_node_list", list},
                                   {"ok", st.ok()},
                                   {"error", st.ok() ? std::string() : st.error().message()}});
    if (st.ok())
      spdlog::warn("slurm: job {} will not run on {} again (ExcNodeList={})", job->job_id,
                   dec.exclude_node, list);
    else
      spdlog::error("slurm: {}", st.error().message());
  }
};

SlurmIntegration::SlurmIntegration(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SlurmIntegration::~SlurmIntegration() = default;

std::unique_ptr<SlurmIntegration> SlurmIntegration::attach(const io::Deps& deps,
                                                           supervisor::JobConfig& config,
                                                           SlurmRole role, const agent::EnvMap& env,
                                                           agent::CommandRunner runner) {
  auto impl = std::make_unique<Impl>(deps, role, std::move(runner));
  auto job = agent::read_slurm_job_env(env);
  if (!job.ok()) {
    spdlog::warn("slurm: {}; the Slurm defaults are off", job.error().message());
    return std::unique_ptr<SlurmIntegration>(new SlurmIntegration(std::move(impl)));
  }
  impl->job = *job;
  if (!impl->job) return std::unique_ptr<SlurmIntegration>(new SlurmIntegration(std::move(impl)));

  const agent::SlurmJobEnv& j = *impl->job;
  const int sig = j.signal ? j.signal->signal : SIGUSR1;
  auto& signals = config.agent.notice_signals;
  if (sig != SIGTERM && sig != SIGINT &&
      std::find(signals.begin(), signals.end(), sig) == signals.end())
    signals.push_back(sig);
  std::string names;
  for (int s : signals) names += (names.empty() ? "" : ",") + agent::signal_name(s);
  spdlog::info("slurm: job {} (restart {}) on {}: notices on SIGTERM, SIGINT{}{}{}", j.job_id,
               j.restart_count, impl->node(), names.empty() ? "" : ", ", names,
               role == SlurmRole::kFollows ? "; the coordinator's node decides the requeue" : "");

  if (auto st = deps.fs.create_dirs(config.run_dir); !st.ok())
    spdlog::warn("slurm: {}", st.error().message());
  auto log = supervisor::EventLog::open(join_path(config.run_dir, "events.jsonl"), deps.clock);
  if (log.ok()) {
    impl->events = std::move(*log);
    impl->events.write("slurm_job", {{"slurm_job_id", uint64_t{j.job_id}},
                                     {"restart_count", uint64_t{j.restart_count}},
                                     {"node", impl->node()},
                                     {"partition", j.partition},
                                     {"notice_signals", names},
                                     {"decides", role == SlurmRole::kDecides}});
  } else {
    spdlog::warn("slurm: {}", log.error().message());
  }
  return std::unique_ptr<SlurmIntegration>(new SlurmIntegration(std::move(impl)));
}

bool SlurmIntegration::active() const { return impl_->job.has_value(); }

void SlurmIntegration::take_decisions() {
  if (impl_->role == SlurmRole::kDecides) return;
  impl_->role = SlurmRole::kDecides;
  if (impl_->job) spdlog::info("slurm: this node runs the coordinator now: it decides the requeue");
}

void SlurmIntegration::observe(std::string_view event,
                               const std::map<std::string, std::string>& fields) {
  Impl& m = *impl_;
  if (!m.job || m.role != SlurmRole::kDecides) return;
  std::string notice;
  if (event == "preempt_notice") {
    auto it = fields.find("reason");
    notice = it == fields.end() ? std::string("notice") : it->second;
  } else if (event == "node_unhealthy") {
    notice = "node-unhealthy";
    uint32_t id = 0;
    if (auto it = fields.find("node"); it != fields.end()) {
      auto [end, ec] =
          std::from_chars(it->second.data(), it->second.data() + it->second.size(), id);
      if (ec != std::errc() || end != it->second.data() + it->second.size()) id = 0;
    }
    if (!m.unhealthy_node) m.unhealthy_node = id;
  } else {
    return;
  }
  m.stops.push_back({notice, std::nullopt});
  m.waiting.push_back(m.stops.size() - 1);
  m.read_state();
}

int SlurmIntegration::finish(int exit_code) {
  Impl& m = *impl_;
  if (!m.job) return exit_code;
  // The reads of the notices tell a user's scancel from the rest: let them finish.
  if (m.reading) m.d.loop.run_until([&] { return !m.reading; }, kReadsSettle);

  agent::SlurmRunOutcome o;
  o.exit_code = exit_code;
  o.restarts_at_start = m.job->restart_count;
  o.stops = m.stops;
  o.is_requeuer = m.role == SlurmRole::kDecides;
  if (o.is_requeuer && m.unhealthy_node) o.unhealthy_node = m.node_name(*m.unhealthy_node);
  if (exit_code == 75 && o.is_requeuer) {
    auto end = m.read_at_end();
    if (end.ok()) o.at_end = *end;
    auto rq = m.scontrol.requeue_exit_lists(75);
    if (!rq.ok()) spdlog::warn("slurm: {}", rq.error().message());
    o.slurm_requeues_exit_75 = rq.ok() && *rq;
  }
  const auto dec = agent::decide_slurm_requeue(o);
  m.events.write("slurm_decision", {{"case", std::string(agent::slurm_case_name(dec.what))},
                                    {"requeue", dec.requeue},
                                    {"exclude_node", dec.exclude_node},
                                    {"why", dec.why}});
  if (exit_code == 75) spdlog::warn("slurm: {}", dec.why);
  m.act(dec, o.at_end);
  return exit_code;
}

}  // namespace shardguard::cli
