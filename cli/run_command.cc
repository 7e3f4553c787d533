#include "cli/run_command.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <filesystem>

#include "agent/cloud_identify.h"
#include "agent/scheduler_env.h"
#include "agent/slurm_policy.h"
#include "agent/slurm_scontrol.h"
#include "cli/checkpoint_location.h"
#include "cli/job_services.h"
#include "cli/node_services.h"
#include "cli/production_deps.h"
#include "cli/run_multinode.h"
#include "cli/slurm_integration.h"
#include "core/exit_codes.h"
#include "core/terminal_text.h"
#include "core/units.h"
#include "io/event_loop.h"
#include "io/http_server.h"
#include "io/process.h"
#include "policies/signal_names.h"
#include "supervisor/event_log.h"
#include "supervisor/job_config_toml.h"
#include "supervisor/machine_config.h"
#include "supervisor/rank_env.h"
#include "supervisor/resume_plan.h"
#include "supervisor/run_dir_lock.h"
#include "supervisor/supervisor.h"

namespace shardguard::cli {
namespace {

struct RunArgs {
  std::string config_path;
  agent::PlacementFlags placement;
  std::optional<std::string> nnodes, rdzv_endpoint, join_window;
  std::string node_address;
  std::optional<uint32_t> nproc;
  std::optional<std::string> checkpoint_dir, run_dir, job_id;
  bool resume_from_job = false;
  std::optional<std::string> resume_from;
  bool fresh = false;
  std::optional<uint32_t> max_restarts;
  std::optional<uint16_t> metrics_port;
  std::optional<uint64_t> every_steps;
  bool check_config = false;
  std::vector<std::string> command;
};

Result<supervisor::JobConfig> build_config(const RunArgs& a) {
  supervisor::JobConfig cfg;
  if (!a.config_path.empty()) {
    SG_ASSIGN_OR_RETURN(cfg, supervisor::load_job_config(a.config_path));
  }
  if (a.nproc) cfg.nproc = *a.nproc;
  if (a.checkpoint_dir) cfg.checkpoint_dir = *a.checkpoint_dir;
  if (a.run_dir) cfg.run_dir = *a.run_dir;
  if (a.job_id) cfg.job_id = *a.job_id;
  if (a.every_steps) {
    cfg.interval_mode = supervisor::IntervalMode::kSteps;
    cfg.every_steps = *a.every_steps;
  }
  if (a.max_restarts) cfg.crash.max_restarts = cfg.hang.max_restarts = *a.max_restarts;
  if (a.metrics_port) cfg.metrics_port = *a.metrics_port;
  if (!a.command.empty()) cfg.command = a.command;
  if (cfg.command.empty())
    return Error(ErrorCode::kInvalid, "no command: give one after `--` or as job.command");
  if (cfg.nproc == 0) return Error(ErrorCode::kInvalid, "--nproc must be at least 1");
  if (a.resume_from) {
    if (*a.resume_from == "none") {
      cfg.resume_from_none = true;
    } else {
      uint64_t step = 0;
      const auto& t = *a.resume_from;
      auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), step);
      if (ec != std::errc() || end != t.data() + t.size())
        return Error(ErrorCode::kInvalid, "--resume-from '" + t + "': a step number or none");
      cfg.resume_from_step = step;
    }
  }
  if (a.fresh && !cfg.resume_from_none)
    return Error(ErrorCode::kInvalid, "--fresh goes with --resume-from none");
  cfg.fresh = a.fresh;
  if (a.resume_from_job) {
    if (cfg.job_id.empty())
      return Error(ErrorCode::kInvalid, "--resume-from-job needs the new job id (--job-id)");
    cfg.resume_from_job = true;
  }
  return cfg;
}

// Which notices a run watches, and for "auto" clouds what this machine was identified as.
std::string describe_notice_sources(const supervisor::JobConfig& cfg, const std::string& setting,
                                    const std::string& evidence) {
  std::string out = "notices watched: SIGTERM and SIGINT (" + format_duration(cfg.grace) + ")";
  for (int sig : cfg.agent.notice_signals)
    out += ", " + std::string(policies::signal_name(sig)) + " (" +
           format_duration(cfg.agent.signal_grace) + ")";
  const std::string& c = cfg.agent.clouds;
  if (c == "none") {
    out += "; no cloud";
  } else if (c == "auto") {
    out += "; the cloud metadata service whose URL [agent] gives, if one answers";
  } else {
    out += "; " + std::string(c == "aws" ? "AWS spot interruptions, rebalance recommendations and maintenance (IMDSv2)"
                              : c == "gcp" ? "GCP preemption and maintenance events (metadata server)"
                                           : "Azure Scheduled Events");
  }
  if (setting == "auto")
    out += c == "none" || c == "auto"
               ? " ([agent] clouds = \"auto\": no cloud by this machine's DMI data: " + evidence +
                     "; no metadata service is asked)"
               : " ([agent] clouds = \"auto\": identified from " + evidence + ")";
  else
    out += " ([agent] clouds = \"" + setting + "\")";
  return out;
}

// One node: the supervisor, its node in this process, the node's services.
int run_single(supervisor::JobConfig cfg, const OpenedLocation& where) {
  auto job_fs = job_filesystem(cfg.run_dir, cfg.checkpoint_dir, cfg.group);
  ProductionDeps production(*job_fs, where.bundle_store());
  const io::Deps& deps = production.deps();
  // Before anything else in the run directory: a second supervisor there is refused.
  auto run_dir = supervisor::claim_run_dir(deps.fs, deps.clock, cfg.run_dir);
  if (!run_dir.ok()) {
    std::fprintf(stderr, "shardguard run: %s\n",
                 escape_lines_for_terminal(run_dir.error().message()).c_str());
    return run_dir.error().code() == ErrorCode::kFenced ? kExitConfig : kExitFailure;
  }
  auto slurm = SlurmIntegration::attach(deps, cfg);  // inside a Slurm job: its defaults
  supervisor::Supervisor sup(deps, cfg);
  auto job = JobServices::start(
      deps, cfg, sup, [&](std::string_view event, const std::map<std::string, std::string>& f) {
        slurm->observe(event, f);
      });
  if (!job.ok()) {
    std::fprintf(stderr, "shardguard run: %s\n",
                 escape_lines_for_terminal(job.error().message()).c_str());
    return kExitUsage;
  }
  NodeServices node(deps, cfg,
                    {[&](const agent::Notice& n) { sup.notice(n); },
                     [&](const std::string& evidence) { sup.report_unhealthy(evidence); },
                     [&] { return sup.state(); }, [&] { return sup.finished(); }});
  sup.set_on_acknowledge([&](const agent::Notice& n) { node.acknowledge(n); });
  if (auto st = sup.start(); !st.ok()) {
    std::fprintf(stderr, "shardguard run: %s\n",
                 escape_lines_for_terminal(st.error().message()).c_str());
    // A directory that is another job's, or requeues that keep failing: requeue will not help.
    // A bad --resume-from (no such step, or none without --fresh): the flags are wrong.
    if (st.error().code() == ErrorCode::kFenced) return kExitConfig;
    return st.error().code() == ErrorCode::kInvalid ? kExitUsage : kExitFailure;
  }
  if (auto st = node.start(); !st.ok()) {
    std::fprintf(stderr, "shardguard run: %s\n",
                 escape_lines_for_terminal(st.error().message()).c_str());
    return kExitFailure;
  }
  while (!sup.finished()) production.loop().run_until([&] { return sup.finished(); }, std::chrono::hours(24));
  // Let the last teardown's kills and the finish hooks go out.
  production.loop().run_for(std::chrono::milliseconds(50));
  node.stop();
  (*job)->stop();
  return slurm->finish(sup.exit_code());  // Slurm: requeue by its table
}

int run(const RunArgs& a) {
  auto cfg = build_config(a);
  if (!cfg.ok()) {
    std::fprintf(stderr, "shardguard run: %s\n",
                 escape_lines_for_terminal(cfg.error().message()).c_str());
    return kExitUsage;
  }
  // Slurm's own expansion of a node list (n[1-3]), bounded and with SIGTERM ignored.
  const agent::Scontrol scontrol(agent::run_command_blocking);
  auto placement = agent::resolve_placement(agent::environment_snapshot(), a.placement,
                                            scontrol.hostnames_function());
  if (!placement.ok()) {
    std::fprintf(stderr, "shardguard run: %s\n",
                 escape_lines_for_terminal(placement.error().message()).c_str());
    return kExitUsage;
  }
  // Under Slurm with SBATCH_SIGNAL, the signal's lead is a window the emergency save must fit
  // (a malformed variable is reported when the Slurm integration attaches).
  if (auto slurm = agent::read_slurm_job_env(agent::environment_snapshot());
      slurm.ok() && *slurm && (*slurm)->signal)
    cfg->slurm_signal_lead = (*slurm)->signal->lead;
  // Where checkpoints go: checked and, for a bucket, reached and probed before anything runs
  // (a missing bucket, refused keys, a skewed clock, a server that ignores conditional
  // writes: one message now, not a failed save later).
  auto where = open_location(cfg->checkpoint_dir, cfg->storage, PosixFilesystem::instance(),
                             /*probe=*/true);
  if (!where.ok()) {
    std::fprintf(stderr, "shardguard run: %s\n",
                 escape_lines_for_terminal(where.error().message()).c_str());
    if (a.check_config) return kExitUsage;
    // Nothing a requeue changes: a bad location or setting, a missing bucket, refused keys.
    return where.error().code() == ErrorCode::kIo || where.error().code() == ErrorCode::kTimeout
               ? kExitFailure
               : kExitConfig;
  }
  if (where->bucket()) cfg->storage = *where->connection->s3_options();  // resolved, for the ranks
  // "auto" clouds: the one this machine's DMI data names (no network), so that the agent
  // polls only that one and the save window is that cloud's notice.
  std::string cloud_evidence;
  const std::string clouds_setting = cfg->agent.clouds;
  {
    const auto& ag = cfg->agent;
    cfg->agent.clouds = agent::resolve_clouds(
        ag.clouds, !ag.aws_url.empty() || !ag.gcp_url.empty() || !ag.azure_url.empty(),
        PosixFilesystem::instance(), ag.dmi_dir, &cloud_evidence);
  }
  const std::string watched = describe_notice_sources(*cfg, clouds_setting, cloud_evidence);
  if (!a.check_config) spdlog::info("{}", watched);
  if (a.check_config) {
    std::printf("config OK: job '%s', %u rank(s) of '%s', checkpoints in '%s', run dir '%s'\n",
                cfg->job_id.empty() ? "(the checkpoint directory's)" : cfg->job_id.c_str(),
                cfg->nproc, cfg->command[0].c_str(), cfg->checkpoint_dir.c_str(),
                cfg->run_dir.c_str());
    if (where->bucket())
      std::printf("checkpoint location %s: reachable; a conditional create, a refused second "
                  "create and a delete of a probe object worked\n",
                  where->describe().c_str());
    const auto inputs = supervisor::machine_config(*cfg).save_window;
    const auto window = policies::shortest_save_window(inputs);
    std::printf("emergency save window: %s for the ranks (the %s's %s less the %s [stop] "
                "safety_margin); a save should take under half of it\n",
                format_duration(window.window).c_str(), window.source.c_str(),
                format_duration(window.lead).c_str(),
                format_duration(window.lead - window.window).c_str());
    // A save measured by an earlier run on this run directory, read without following links
    // or opening anything but a regular file.
    auto fs = job_filesystem(cfg->run_dir, cfg->checkpoint_dir, cfg->group);
    const auto past =
        supervisor::parse_events(fs->read_file(join_path(cfg->run_dir, "events.jsonl")).value_or(""));
    if (auto took = supervisor::last_save_time(past)) {
      const auto check = policies::check_save_window(inputs, *took);
      if (check.warning)
        std::printf("warning: %s (measured by an earlier run on this run directory)\n",
                    check.warning->c_str());
      else
        std::printf("the last save on this run directory took %s: %.0f%% of the window\n",
                    format_duration(*took).c_str(), check.fraction * 100);
    }
    std::printf("%s\n", watched.c_str());
    if (*placement) std::printf("%s\n", (*placement)->describe().c_str());
    return kExitOk;
  }
  if (auto st = io::become_child_subreaper(); !st.ok())
    spdlog::warn("cannot become a subreaper ({}); orphaned grandchildren may escape teardown",
                 st.error().message());
  if (!*placement) return run_single(*cfg, *where);
  MultiNodeArgs m;
  m.placement = **placement;
  m.node_address = a.node_address;
  if (a.join_window) {
    auto w = parse_duration(*a.join_window);
    if (!w.ok()) {
      std::fprintf(stderr, "shardguard run: --join-window: %s\n", w.error().message().c_str());
      return kExitUsage;
    }
    m.join_window = *w;
  }
  m.location = *where;
  return run_multinode(*cfg, m);
}

}  // namespace

void add_run_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<RunArgs>();
  auto* run_cmd = app.add_subcommand("run", "Run a training command under supervision: restarts, "
                                            "emergency checkpoints, resume");
  run_cmd->add_option("--config", a->config_path, "job config (TOML)");
  run_cmd->add_option("--nproc,--nproc-per-node,--nproc_per_node", a->nproc,
                      "ranks to start on this node");
  run_cmd->add_option("--nnodes", a->nnodes, "nodes of the job: N, or MIN:MAX (elastic)");
  run_cmd->add_option("--rdzv-endpoint,--rdzv_endpoint", a->rdzv_endpoint,
                      "HOST:PORT of the coordinator (node rank 0, or `shardguard coordinator`)");
  run_cmd->add_option("--node-rank,--node_rank", a->placement.node_rank,
                      "this node's rank (0 runs the coordinator); default: the first to bind the "
                      "endpoint is 0");
  run_cmd->add_option("--secret-file", a->placement.secret_file,
                      "shared secret of the job's nodes (owner-only; or SHARDGUARD_SECRET_FILE)");
  run_cmd->add_option("--node-address", a->node_address,
                      "where this node's ranks are reached (MASTER_ADDR when it hosts rank 0); "
                      "default: as the coordinator sees it");
  run_cmd->add_option("--join-window", a->join_window,
                      "with MIN:MAX, how long to wait for more than MIN nodes at start (e.g. 10s)");
  run_cmd->add_option("--checkpoint-dir", a->checkpoint_dir,
                      "where checkpoints go: a directory, or s3://BUCKET/PREFIX ([storage])");
  run_cmd->add_option("--run-dir", a->run_dir, "logs, events and the control socket");
  run_cmd->add_option("--job-id", a->job_id,
                      "stable job name (default: the checkpoint directory's, or a new one)");
  run_cmd->add_option("--resume-from", a->resume_from,
                      "STEP: roll back to this checkpoint (newer ones are quarantined); none: "
                      "start fresh (with --fresh, every checkpoint is quarantined)");
  run_cmd->add_flag("--fresh", a->fresh,
                    "with --resume-from none: set every existing checkpoint aside");
  run_cmd->add_flag("--resume-from-job", a->resume_from_job,
                    "take over a checkpoint directory that belongs to another job id");
  run_cmd->add_option("--max-restarts", a->max_restarts, "crash and hang restarts per window");
  run_cmd->add_option("--checkpoint-every", a->every_steps, "checkpoint every N steps");
  run_cmd->add_option("--metrics-port", a->metrics_port, "serve Prometheus metrics on this port");
  run_cmd->add_flag("--check-config", a->check_config, "validate the configuration and exit");
  run_cmd->add_option("command", a->command, "the training command, after --");
  run_cmd->callback([a, exit_code] {
    if (a->nnodes) {
      auto n = agent::parse_node_count(*a->nnodes);
      if (!n.ok()) throw CLI::ValidationError("--nnodes", n.error().message());
      a->placement.nnodes = *n;
    }
    if (a->rdzv_endpoint) {
      auto e = agent::parse_endpoint(*a->rdzv_endpoint);
      if (!e.ok()) throw CLI::ValidationError("--rdzv-endpoint", e.error().message());
      a->placement.rdzv_endpoint = *e;
    }
    *exit_code = run(*a);
  });
}

}  // namespace shardguard::cli
