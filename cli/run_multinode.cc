#include "cli/run_multinode.h"

#include <arpa/inet.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>

#include "cli/job_services.h"
#include "cli/node_services.h"
#include "cli/production_deps.h"
#include "core/exit_codes.h"
#include "io/event_loop.h"
#include "net/secret.h"
#include "supervisor/cluster_client.h"
#include "supervisor/cluster_server.h"
#include "supervisor/event_log.h"
#include "supervisor/local_launcher.h"
#include "supervisor/node_runner.h"
#include "supervisor/rank_env.h"
#include "supervisor/supervisor.h"

namespace shardguard::cli {
namespace {

using namespace std::chrono_literals;

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "node";
  return buf;
}

// The address to listen on for the endpoint: its host when that is an IP literal (a node with
// several addresses, or 127.0.0.x in tests), every address otherwise (a DNS name).
std::string listen_address(const std::string& host) {
  unsigned char buf[16];
  if (::inet_pton(AF_INET, host.c_str(), buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), buf) == 1)
    return host;
  return "0.0.0.0";
}

int fail(const std::string& message, int code) {
  std::fprintf(stderr, "shardguard run: %s\n", message.c_str());
  return code;
}

// The loop runs until `done`, then a moment more so that the last frames and kills go out.
template <typename Done>
void run_loop(ProductionDeps& production, Done done) {
  while (!done()) production.loop().run_until(done, std::chrono::hours(24));
  production.loop().run_for(200ms);
}

// This node embeds the coordinator: the decision core, the network side, its own ranks.
int run_coordinator(ProductionDeps& production, supervisor::Supervisor& sup,
                    supervisor::ClusterServer& server, const supervisor::JobConfig& cfg,
                    const MultiNodeArgs& args) {
  const io::Deps& deps = production.deps();
  auto job = JobServices::start(deps, cfg, sup);
  if (!job.ok()) return fail(job.error().message(), kExitUsage);
  NodeServices node(deps, cfg,
                    {[&](const agent::Notice& n) { sup.notice(n); },
                     [&](const std::string& evidence) { sup.report_unhealthy(evidence); },
                     [&] { return sup.state(); }, [&] { return sup.finished(); }});
  sup.set_on_acknowledge([&](const agent::Notice& n) { node.acknowledge(n); });
  sup.set_on_finish([&](int code, const std::string& summary) { server.finish(code, summary); });
  if (auto st = sup.start(); !st.ok())
    return fail(st.error().message(), st.error().code() == ErrorCode::kFenced ? kExitConfig : kExitFailure);
  server.set_job_id(sup.job_id());
  if (auto st = node.start(); !st.ok()) return fail(st.error().message(), kExitFailure);
  spdlog::info("coordinator of job '{}' on {}:{}, {} node(s) of {} rank(s)", sup.job_id(),
               args.placement.rdzv.host, args.placement.rdzv.port,
               agent::to_string(args.placement.nnodes), cfg.nproc);
  run_loop(production, [&] { return sup.finished(); });
  node.stop();
  (*job)->stop();
  server.stop();
  return sup.exit_code();
}

// A node that follows the coordinator: its ranks, its services, the connection.
int run_node(ProductionDeps& production, const supervisor::JobConfig& cfg,
             std::shared_ptr<const net::Secret> secret, const MultiNodeArgs& args) {
  const io::Deps& deps = production.deps();
  if (auto st = deps.fs.create_dirs(cfg.run_dir); !st.ok()) return fail(st.error().message(), kExitFailure);
  auto events = supervisor::EventLog::open(join_path(cfg.run_dir, "events.jsonl"), deps.clock);
  if (!events.ok()) return fail(events.error().message(), kExitFailure);
  supervisor::LocalLauncher launcher(deps.loop, deps.launcher);
  supervisor::ClusterClient* client_ptr = nullptr;
  supervisor::NodeRunnerOptions ro;
  ro.node = args.placement.node_rank.value_or(0);
  ro.config = cfg;
  ro.control_socket = supervisor::control_socket_path(cfg.run_dir);
  ro.run_dir = cfg.run_dir;
  supervisor::NodeRunner runner(
      deps, ro, launcher,
      [&](supervisor::Event e) {
        if (client_ptr) client_ptr->report(std::move(e));
      },
      [&](std::string_view type, supervisor::EventFields fields) { events->write(type, fields); });
  if (auto st = runner.start(); !st.ok()) return fail(st.error().message(), kExitFailure);
  supervisor::ClusterClientOptions co;
  co.host = args.placement.rdzv.host;
  co.port = args.placement.rdzv.port;
  co.secret = secret;
  co.name = host_name();
  co.address = args.node_address;
  co.node_rank = args.placement.node_rank;
  co.nproc = cfg.nproc;
  co.job_id = cfg.job_id;
  co.coordinator_timeout = cfg.coordinator_timeout;
  supervisor::ClusterClient client(deps, co, runner);
  client_ptr = &client;
  NodeServices node(deps, cfg,
                    {[&](const agent::Notice& n) { client.notice(n); },
                     [&](const std::string& evidence) {
                       client.unhealthy(evidence, deps.clock.wall_now() + cfg.grace);
                     },
                     [] { return std::string("notice sent to the coordinator"); },
                     [&] { return client.finished(); }});
  client.set_on_acknowledge([&](const agent::Notice& n) { node.acknowledge(n); });
  events->write("start", {{"role", std::string("node")},
                          {"coordinator", agent::to_string(args.placement.rdzv)}});
  if (auto st = client.start(); !st.ok()) return fail(st.error().message(), kExitFailure);
  if (auto st = node.start(); !st.ok()) return fail(st.error().message(), kExitFailure);
  spdlog::info("node of a {}-node job; coordinator at {}", agent::to_string(args.placement.nnodes),
               agent::to_string(args.placement.rdzv));
  run_loop(production, [&] { return client.finished(); });
  node.stop();
  events->write("finish", {{"exit_code", int64_t{client.exit_code()}}});
  return client.exit_code();
}

}  // namespace

int run_multinode(const supervisor::JobConfig& cfg, const MultiNodeArgs& args) {
  const agent::Placement& p = args.placement;
  auto secret = net::load_secret(p.secret_file);
  if (!secret.ok()) return fail(secret.error().message(), kExitUsage);
  auto shared = std::make_shared<const net::Secret>(std::move(*secret));
  auto job_fs = job_filesystem(cfg.run_dir, cfg.checkpoint_dir, cfg.group);
  ProductionDeps production(*job_fs);
  const io::Deps& deps = production.deps();
  for (const auto& line : p.sources) spdlog::info("placement: {}", line);

  supervisor::SupervisorOptions so;
  so.local_node = true;
  so.local_node_id = p.node_rank.value_or(0);
  so.local_address = args.node_address.empty() ? p.rdzv.host : args.node_address;
  so.min_nodes = p.nnodes.min;
  so.max_nodes = p.nnodes.max;
  so.join_window = args.join_window;
  const supervisor::JobConfig& coordinator_cfg = cfg;
  supervisor::ClusterServerOptions sopt;
  sopt.listen_address = listen_address(p.rdzv.host);
  sopt.port = p.rdzv.port;
  sopt.secret = shared;
  sopt.nproc_per_node = cfg.nproc;

  const bool coordinator_by_rank = p.node_rank && *p.node_rank == 0;
  if (coordinator_by_rank || !p.node_rank) {
    // Node rank 0 runs the coordinator; without a rank, whoever binds the endpoint first does.
    supervisor::Supervisor sup(deps, coordinator_cfg, so);
    supervisor::ClusterServer server(deps, sopt, sup);
    auto bound = server.start();
    if (bound.ok()) return run_coordinator(production, sup, server, coordinator_cfg, args);
    if (coordinator_by_rank)
      return fail("cannot listen on " + agent::to_string(p.rdzv) + ": " + bound.error().message(),
                  kExitFailure);
    spdlog::info("the endpoint {} is taken: another node coordinates", agent::to_string(p.rdzv));
  }
  return run_node(production, cfg, shared, args);
}

}  // namespace shardguard::cli
