// `shardguard coordinator --listen ADDR:PORT --nnodes N|MIN:MAX --nproc-per-node P
// [--config job.toml] [--checkpoint-dir D] [--run-dir R] [--secret-file F] [--job-id ID]`: the
// coordinator of a multi-node job on a machine that outlives the training nodes (a Slurm head
// node, a Kubernetes Deployment). It runs no ranks; the nodes' `shardguard run --rdzv-endpoint`
// connect to it. Restarted, it takes over the running epoch from its record in the checkpoint
// directory (which it must see too) instead of relaunching it.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include <cstdio>

#include "agent/scheduler_env.h"
#include "cli/checkpoint_location.h"
#include "cli/job_services.h"
#include "cli/production_deps.h"
#include "cli/run_command.h"
#include "core/exit_codes.h"
#include "core/units.h"
#include "io/event_loop.h"
#include "net/secret.h"
#include "supervisor/cluster_server.h"
#include "supervisor/coordinator_log.h"
#include "supervisor/job_config_toml.h"
#include "supervisor/run_dir_lock.h"
#include "supervisor/supervisor.h"

namespace shardguard::cli {
namespace {

struct CoordinatorArgs {
  std::string listen;
  std::string nnodes;
  uint32_t nproc = 1;
  std::string config_path;
  std::optional<std::string> checkpoint_dir, run_dir, job_id, secret_file;
  std::optional<std::string> join_window;
};

int fail(const std::string& message, int code) {
  std::fprintf(stderr, "shardguard coordinator: %s\n", message.c_str());
  return code;
}

int run_coordinator(const CoordinatorArgs& a) {
  supervisor::JobConfig cfg;
  if (!a.config_path.empty()) {
    auto loaded = supervisor::load_job_config(a.config_path);
    if (!loaded.ok()) return fail(loaded.error().message(), kExitUsage);
    cfg = std::move(*loaded);
  }
  if (a.checkpoint_dir) cfg.checkpoint_dir = *a.checkpoint_dir;
  if (a.run_dir) cfg.run_dir = *a.run_dir;
  if (a.job_id) cfg.job_id = *a.job_id;
  cfg.nproc = a.nproc;
  auto nodes = agent::parse_node_count(a.nnodes);
  if (!nodes.ok()) return fail(nodes.error().message(), kExitUsage);
  auto listen = agent::parse_endpoint(a.listen, "--listen");
  if (!listen.ok()) return fail(listen.error().message(), kExitUsage);
  auto secret = net::load_secret(a.secret_file.value_or(""));
  if (!secret.ok()) return fail(secret.error().message(), kExitUsage);
  Duration join_window{0};
  if (a.join_window) {
    auto w = parse_duration(*a.join_window);
    if (!w.ok()) return fail("--join-window: " + w.error().message(), kExitUsage);
    join_window = *w;
  }

  auto where = open_location(cfg.checkpoint_dir, cfg.storage, PosixFilesystem::instance(),
                             /*probe=*/true);
  if (!where.ok())
    return fail(where.error().message(),
                where.error().code() == ErrorCode::kIo ? kExitFailure : kExitConfig);
  if (where->bucket()) cfg.storage = *where->connection->s3_options();
  auto job_fs = job_filesystem(cfg.run_dir, cfg.checkpoint_dir, cfg.group);
  ProductionDeps production(*job_fs, where->bundle_store());
  const io::Deps& deps = production.deps();
  auto run_dir = supervisor::claim_run_dir(deps.fs, deps.clock, cfg.run_dir);
  if (!run_dir.ok())
    return fail(run_dir.error().message(),
                run_dir.error().code() == ErrorCode::kFenced ? kExitConfig : kExitFailure);
  supervisor::SupervisorOptions so;
  so.local_node = false;
  so.min_nodes = nodes->min;
  so.max_nodes = nodes->max;
  so.join_window = join_window;
  so.write_coordinator_log = true;
  so.coordinator_address = agent::to_string(*listen);
  // Restarted: the running epoch in the record is adopted, not relaunched.
  storage::StoreRef store(deps.checkpoints, deps.fs, cfg.checkpoint_dir);
  auto record = supervisor::load_coordinator_state(store.get());
  if (!record.ok()) spdlog::warn("{}; starting afresh", record.error().message());
  if (record.ok() && *record && (*record)->running &&
      (cfg.job_id.empty() || cfg.job_id == (*record)->job_id)) {
    so.adopt = **record;
    cfg.job_id = (*record)->job_id;
  }
  supervisor::Supervisor sup(deps, cfg, so);
  supervisor::ClusterServerOptions sopt;
  sopt.listen_address = listen->host;
  sopt.port = listen->port;
  sopt.secret = std::make_shared<const net::Secret>(std::move(*secret));
  sopt.nproc_per_node = cfg.nproc;
  supervisor::ClusterServer server(deps, sopt, sup);
  auto job = JobServices::start(deps, cfg, sup);
  if (!job.ok()) return fail(job.error().message(), kExitUsage);
  sup.set_on_finish([&](int code, const std::string& summary) { server.finish(code, summary); });
  if (auto st = sup.start(); !st.ok())
    return fail(st.error().message(), st.error().code() == ErrorCode::kFenced ? kExitConfig : kExitFailure);
  server.set_job_id(sup.job_id());
  auto port = server.start();
  if (!port.ok()) return fail("listen on " + a.listen + ": " + port.error().message(), kExitFailure);
  spdlog::info("coordinator of job '{}' listening on {}:{} for {} node(s) of {} rank(s)",
               sup.job_id(), listen->host, *port, a.nnodes, cfg.nproc);
  while (!sup.finished()) production.loop().run_until([&] { return sup.finished(); }, std::chrono::hours(24));
  production.loop().run_for(std::chrono::milliseconds(200));
  (*job)->stop();
  server.stop();
  return sup.exit_code();
}

}  // namespace

void add_coordinator_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<CoordinatorArgs>();
  auto* cmd = app.add_subcommand("coordinator",
                                 "Coordinate a multi-node job from a machine that runs no ranks");
  cmd->add_option("--listen", a->listen, "ADDR:PORT the nodes' --rdzv-endpoint names")->required();
  cmd->add_option("--nnodes", a->nnodes, "nodes of the job: N, or MIN:MAX (elastic)")->required();
  cmd->add_option("--nproc-per-node,--nproc_per_node,--nproc", a->nproc, "ranks per node")
      ->required();
  cmd->add_option("--config", a->config_path, "job config (TOML): restarts, checkpoints, hooks");
  cmd->add_option("--checkpoint-dir", a->checkpoint_dir,
                  "the job's shared checkpoint directory, or s3://BUCKET/PREFIX");
  cmd->add_option("--run-dir", a->run_dir, "the job's timeline and metrics");
  cmd->add_option("--job-id", a->job_id, "default: the checkpoint directory's");
  cmd->add_option("--secret-file", a->secret_file, "shared secret (or SHARDGUARD_SECRET_FILE)");
  cmd->add_option("--join-window", a->join_window, "with MIN:MAX, wait this long for more nodes");
  cmd->callback([a, exit_code] { *exit_code = run_coordinator(*a); });
}

}  // namespace shardguard::cli
