#include "cli/run_multinode.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string_view>

#include "cli/job_services.h"
#include "cli/node_services.h"
#include "cli/production_deps.h"
#include "cli/slurm_integration.h"
#include "core/exit_codes.h"
#include "core/host_name.h"
#include "core/terminal_text.h"
#include "io/event_loop.h"
#include "net/secret.h"
#include "supervisor/cluster_client.h"
#include "supervisor/cluster_server.h"
#include "supervisor/coordinator_log.h"
#include "supervisor/event_log.h"
#include "supervisor/local_launcher.h"
#include "supervisor/node_runner.h"
#include "supervisor/rank_env.h"
#include "supervisor/run_dir_lock.h"
#include "supervisor/supervisor.h"

namespace shardguard::cli {
namespace {

using namespace std::chrono_literals;

std::string host_name() { return shardguard::host_name("node"); }

// The address to listen on for the endpoint: its host when that is an IP literal (a node with
// several addresses, or 127.0.0.x in tests), every address otherwise (a DNS name).
std::string listen_address(const std::string& host) {
  unsigned char buf[16];
  if (::inet_pton(AF_INET, host.c_str(), buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), buf) == 1)
    return host;
  return "0.0.0.0";
}

// Whether `host` names this node: the address it was told it has, its host name (which
// /etc/hosts may map to an address no interface holds, as Debian's 127.0.1.1, while the other
// nodes resolve it to the real one: Slurm's NodeAddr defaults to the node's name), or an
// address one of its interfaces holds (the endpoint may be on another interface than the
// ranks' address, as 127.0.0.1 beside --node-address 127.0.0.2). Node rank 0 embeds the
// coordinator only then: an endpoint elsewhere is a standalone `shardguard coordinator`.
bool endpoint_is_here(const std::string& host, const std::string& node_address) {
  if (!node_address.empty() && host == node_address) return true;
  if (host == host_name()) return true;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  ifaddrs* ifs = nullptr;
  bool here = false;
  if (::getifaddrs(&ifs) == 0) {
    for (addrinfo* a = found; a && !here; a = a->ai_next)
      for (ifaddrs* i = ifs; i && !here; i = i->ifa_next) {
        if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != a->ai_family) continue;
        if (a->ai_family == AF_INET)
          here = reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr.s_addr ==
                 reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
        else if (a->ai_family == AF_INET6)
          here = std::memcmp(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr,
                             &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, 16) == 0;
      }
    ::freeifaddrs(ifs);
  }
  ::freeaddrinfo(found);
  return here;
}

int fail(const std::string& message, int code) {
  std::fprintf(stderr, "shardguard run: %s\n", escape_lines_for_terminal(message).c_str());
  return code;
}

// The loop runs until `done`, then a moment more so that the last frames and kills go out.
template <typename Done>
void run_loop(ProductionDeps& production, Done done) {
  while (!done()) production.loop().run_until(done, std::chrono::hours(24));
  production.loop().run_for(200ms);
}

// The address of the node that coordinates the job now by the coordinator record, when that
// is another node than `self` (a successor took over while this node was gone).
std::optional<std::string> successor_holding_job(const io::Deps& deps, const std::string& location,
                                                 supervisor::NodeId self) {
  storage::StoreRef store(deps.checkpoints, deps.fs, location);
  auto record = supervisor::load_coordinator_state(store.get());
  if (!record.ok() || !*record || !(*record)->coordinator_node ||
      *(*record)->coordinator_node == self)
    return std::nullopt;
  for (const auto& m : (*record)->members)
    if (m.node == *(*record)->coordinator_node && !m.address.empty()) return m.address;
  return std::nullopt;
}

// How the embedded coordinator ended: an exit code, or (a node rank 0 that finds its job held
// by the successor that took over from it) the host of the coordinator to join instead.
struct CoordinatorOutcome {
  int exit_code = 0;
  std::string join_host;
};

// This node embeds the coordinator: the decision core, the network side, its own ranks.
// Inside a Slurm job it decides the job's requeue, from the notices of every node.
CoordinatorOutcome run_coordinator(ProductionDeps& production, supervisor::Supervisor& sup,
                                   supervisor::ClusterServer& server,
                                   const supervisor::JobConfig& cfg, const MultiNodeArgs& args,
                                   SlurmIntegration& slurm) {
  const io::Deps& deps = production.deps();
  auto job = JobServices::start(
      deps, cfg, sup, [&](std::string_view event, const std::map<std::string, std::string>& f) {
        slurm.observe(event, f);
      });
  if (!job.ok()) return {fail(job.error().message(), kExitUsage), {}};
  NodeServices node(deps, cfg,
                    {[&](const agent::Notice& n) { sup.notice(n); },
                     [&](const std::string& evidence) { sup.report_unhealthy(evidence); },
                     [&] { return sup.state(); }, [&] { return sup.finished(); }});
  sup.set_on_acknowledge([&](const agent::Notice& n) { node.acknowledge(n); });
  sup.set_on_finish([&](int code, const std::string& summary) { server.finish(code, summary); });
  if (auto st = sup.start(); !st.ok()) {
    if (st.error().code() != ErrorCode::kFenced)
      return {fail(st.error().message(), kExitFailure), {}};
    // The location is held. When the record says a successor coordinates (it took over while
    // this node was gone), this node joins it instead of refusing: a fixed-size job would
    // otherwise wait out rendezvous_timeout for a node that never comes back.
    const supervisor::NodeId self = args.placement.node_rank.value_or(0);
    if (auto host = successor_holding_job(deps, cfg.checkpoint_dir, self)) {
      spdlog::warn(
          "node {}: {}; the coordinator record names the node at {} as the job's "
          "coordinator (it took over): joining it",
          self, st.error().message(), *host);
      (*job)->stop();
      server.stop();
      return {0, *host};
    }
    return {fail(st.error().message(), kExitConfig), {}};
  }
  server.set_job_id(sup.job_id());
  if (auto st = node.start(); !st.ok()) return {fail(st.error().message(), kExitFailure), {}};
  spdlog::info("coordinator of job '{}' on {}:{}, {} node(s) of {} rank(s)", sup.job_id(),
               args.placement.rdzv.host, args.placement.rdzv.port,
               agent::to_string(args.placement.nnodes), cfg.nproc);
  run_loop(production, [&] { return sup.finished(); });
  node.stop();
  (*job)->stop();
  server.stop();
  return {slurm.finish(sup.exit_code()), {}};  // Slurm: requeue by its table, once for the job
}

// A node that follows the coordinator: its ranks, its services, the connection. When the
// coordinator stays away, the lowest-numbered surviving node of its record takes over: it
// adopts the running epoch from the record (the ranks keep training) and the others follow it
// (inside a Slurm job, the node that took over decides the requeue from then on).
class FollowerNode {
 public:
  // `coordinator_host`: where the coordinator is first looked for, when not the endpoint's host
  // (a successor that holds the job).
  FollowerNode(ProductionDeps& production, const supervisor::JobConfig& cfg,
               std::shared_ptr<const net::Secret> secret, const MultiNodeArgs& args,
               SlurmIntegration& slurm, std::string coordinator_host = {})
      : production_(production),
        deps_(production.deps()),
        cfg_(cfg),
        secret_(std::move(secret)),
        args_(args),
        slurm_(slurm),
        initial_host_(std::move(coordinator_host)),
        launcher_(deps_.loop, deps_.launcher, supervisor::process_record_path(cfg.run_dir)) {}

  int run() {
    if (auto st = deps_.fs.create_dirs(cfg_.run_dir); !st.ok()) return fail(st.error().message(), kExitFailure);
    auto events = supervisor::EventLog::open(join_path(cfg_.run_dir, "events.jsonl"), deps_.clock);
    if (!events.ok()) return fail(events.error().message(), kExitFailure);
    events_ = std::move(*events);
    supervisor::NodeRunnerOptions ro;
    ro.node = args_.placement.node_rank.value_or(0);
    ro.config = cfg_;
    ro.control_socket = supervisor::control_socket_path(cfg_.run_dir);
    ro.run_dir = cfg_.run_dir;
    runner_ = std::make_unique<supervisor::NodeRunner>(
        deps_, ro, launcher_, [this](supervisor::Event e) { client_->report(std::move(e)); },
        [this](std::string_view type, supervisor::EventFields fields) { events_.write(type, fields); });
    if (auto st = runner_->start(); !st.ok()) return fail(st.error().message(), kExitFailure);
    supervisor::ClusterClientOptions co;
    co.host = args_.placement.rdzv.host;
    co.port = args_.placement.rdzv.port;
    co.secret = secret_;
    co.name = host_name();
    co.address = args_.node_address;
    co.node_rank = args_.placement.node_rank;
    co.nproc = cfg_.nproc;
    co.job_id = cfg_.job_id;
    co.coordinator_timeout = cfg_.coordinator_timeout;
    co.term_grace = cfg_.term_grace;
    if (!initial_host_.empty()) co.host = initial_host_;
    following_ = co.host;
    client_ = std::make_unique<supervisor::ClusterClient>(deps_, co, *runner_);
    client_->set_on_away([this] { coordinator_away(); });
    node_ = std::make_unique<NodeServices>(
        deps_, cfg_,
        NoticeSink{[this](const agent::Notice& n) { sup_ ? sup_->notice(n) : client_->notice(n); },
                   [this](const std::string& evidence) {
                     if (sup_) return sup_->report_unhealthy(evidence);
                     client_->unhealthy(evidence, deps_.clock.wall_now() + cfg_.grace);
                   },
                   [this] { return sup_ ? sup_->state() : std::string("notice sent to the coordinator"); },
                   [this] { return finished(); }});
    client_->set_on_acknowledge([this](const agent::Notice& n) { node_->acknowledge(n); });
    events_.write("start", {{"role", std::string("node")},
                            {"coordinator", agent::to_string(args_.placement.rdzv)}});
    if (auto st = client_->start(); !st.ok()) return fail(st.error().message(), kExitFailure);
    if (auto st = node_->start(); !st.ok()) return fail(st.error().message(), kExitFailure);
    spdlog::info("node of a {}-node job; coordinator at {}:{}",
                 agent::to_string(args_.placement.nnodes), co.host, co.port);
    run_loop(production_, [this] { return finished(); });
    node_->stop();
    if (server_) server_->stop();
    if (job_) job_->stop();
    const int code = exit_code();
    events_.write("finish", {{"exit_code", int64_t{code}}});
    return slurm_.finish(code);
  }

 private:
  bool finished() const { return sup_ ? sup_->finished() : client_->finished(); }
  int exit_code() const { return sup_ ? sup_->exit_code() : client_->exit_code(); }

  // The coordinator has been away for a while: follow the one that took over since (the
  // record names it), else walk the successors in node order, or become the next one.
  void coordinator_away() {
    storage::StoreRef store(deps_.checkpoints, deps_.fs, cfg_.checkpoint_dir);
    auto record = supervisor::load_coordinator_state(store.get());
    if (!record.ok() || !*record) {
      spdlog::warn("node: no coordinator record to find a successor in: {}",
                   record.ok() ? std::string("none written yet") : record.error().message());
      return;
    }
    const supervisor::CoordinatorState& state = **record;
    // Two successors can race for the location's lease; the loser must find the winner, whose
    // record names it (its own members may not include this node yet).
    const std::optional<std::string> named = named_coordinator(state);
    const bool new_coordinator = named && *named != last_named_ && *named != following_;
    last_named_ = named.value_or("");
    if (new_coordinator) {
      spdlog::warn("node: the record names node {} at {} as the coordinator now; following it",
                   state.coordinator_node ? std::to_string(*state.coordinator_node) : "-", *named);
      successor_index_ = 0;
      return follow(*named);
    }
    // Only a member of the running job takes over or looks for a successor: a node that never
    // joined has no ranks to adopt, and a record of an earlier run names nobody who will
    // answer. It waits for the coordinator until coordinator_timeout ends it.
    if (!client_->joined()) return;
    std::vector<supervisor::CoordinatorState::Member> candidates;
    for (const auto& m : state.members)
      if (!state.coordinator_node || m.node != *state.coordinator_node) candidates.push_back(m);
    std::sort(candidates.begin(), candidates.end(),
              [](const auto& a, const auto& b) { return a.node < b.node; });
    if (candidates.size() <= successor_index_) {
      spdlog::warn("node: no successor left to try; waiting for the coordinator");
      successor_index_ = 0;
      return follow(args_.placement.rdzv.host);
    }
    const auto& next = candidates[successor_index_++];
    if (next.node == runner_->node()) return take_over(state);
    follow(next.address);
  }

  // The host of the coordinator the record names (an embedded one by its node's address), or
  // nullopt when that is this node or no reachable address is known.
  std::optional<std::string> named_coordinator(const supervisor::CoordinatorState& state) const {
    if (state.coordinator_node) {
      if (*state.coordinator_node == runner_->node()) return std::nullopt;
      for (const auto& m : state.members)
        if (m.node == *state.coordinator_node && !m.address.empty()) return m.address;
    }
    auto at = agent::parse_endpoint(state.coordinator_address, "the coordinator record's address");
    if (!at.ok() || at->host.empty() || at->host == "0.0.0.0" || at->host == "::")
      return std::nullopt;
    return at->host;
  }

  void follow(const std::string& host) {
    following_ = host;
    client_->retarget(host, args_.placement.rdzv.port);
  }

  void take_over(const supervisor::CoordinatorState& state) {
    spdlog::warn("node {}: the coordinator is gone; taking over from its record", runner_->node());
    const std::string address = args_.node_address.empty() ? "0.0.0.0" : args_.node_address;
    supervisor::SupervisorOptions so;
    so.local_node = false;
    so.existing_node = runner_.get();
    so.local_node_id = runner_->node();
    so.local_address = args_.node_address;
    so.min_nodes = args_.placement.nnodes.min;
    so.max_nodes = args_.placement.nnodes.max;
    so.join_window = args_.join_window;
    so.write_coordinator_log = true;
    so.coordinator_address = address + ":" + std::to_string(args_.placement.rdzv.port);
    so.adopt = state;
    // The predecessor's own node died with it: it is not waited for.
    if (state.coordinator_node) {
      auto& members = so.adopt->members;
      members.erase(std::remove_if(members.begin(), members.end(),
                                   [&](const auto& m) { return m.node == *state.coordinator_node; }),
                    members.end());
    }
    supervisor::JobConfig cfg = cfg_;
    cfg.job_id = state.job_id;
    auto sup = std::make_unique<supervisor::Supervisor>(deps_, cfg, so);
    supervisor::ClusterServerOptions sopt;
    sopt.listen_address = listen_address(address);
    sopt.port = args_.placement.rdzv.port;
    sopt.secret = secret_;
    sopt.nproc_per_node = cfg.nproc;
    sopt.job_id = state.job_id;
    auto server = std::make_unique<supervisor::ClusterServer>(deps_, sopt, *sup);
    client_->detach();
    auto bound = server->start();
    Status started = bound.ok() ? sup->start() : Status(bound.error());
    if (!started.ok()) {
      // The old coordinator still holds the directory (a partition, not a death): stay a node.
      spdlog::warn("node: cannot take over: {}; following the coordinator again", started.error().message());
      runner_->set_report([this](supervisor::Event e) { client_->report(std::move(e)); });
      successor_index_ = 0;
      return follow(args_.placement.rdzv.host);
    }
    sup->set_on_acknowledge([this](const agent::Notice& n) { node_->acknowledge(n); });
    sup->set_on_finish([this](int code, const std::string& summary) { server_->finish(code, summary); });
    slurm_.take_decisions();
    auto job = JobServices::start(
        deps_, cfg, *sup,
        [this](std::string_view event, const std::map<std::string, std::string>& f) {
          slurm_.observe(event, f);
        });
    if (job.ok()) job_ = std::move(*job);
    events_.write("takeover", {{"attempt", state.epoch}, {"listen", so.coordinator_address}});
    sup_ = std::move(sup);
    server_ = std::move(server);
  }

  ProductionDeps& production_;
  const io::Deps& deps_;
  supervisor::JobConfig cfg_;
  std::shared_ptr<const net::Secret> secret_;
  MultiNodeArgs args_;
  SlurmIntegration& slurm_;
  std::string initial_host_;
  supervisor::EventLog events_;
  supervisor::LocalLauncher launcher_;
  std::unique_ptr<supervisor::NodeRunner> runner_;
  std::unique_ptr<supervisor::ClusterClient> client_;
  std::unique_ptr<NodeServices> node_;
  // Once this node took over as the coordinator.
  std::unique_ptr<supervisor::Supervisor> sup_;
  std::unique_ptr<supervisor::ClusterServer> server_;
  std::unique_ptr<JobServices> job_;
  size_t successor_index_ = 0;
  std::string following_ = args_.placement.rdzv.host;  // the host the client connects to
  std::string last_named_;  // the coordinator the record named when last read
};

}  // namespace

int run_multinode(const supervisor::JobConfig& config, const MultiNodeArgs& args) {
  const agent::Placement& p = args.placement;
  supervisor::JobConfig cfg = config;  // the Slurm integration adds the job's signal
  auto secret = net::load_secret(p.secret_file);
  if (!secret.ok()) return fail(secret.error().message(), kExitUsage);
  auto shared = std::make_shared<const net::Secret>(std::move(*secret));
  auto job_fs = job_filesystem(cfg.run_dir, cfg.checkpoint_dir, cfg.group);
  ProductionDeps production(*job_fs, args.location.bundle_store());
  const io::Deps& deps = production.deps();
  // Before anything else in the run directory: a second supervisor there is refused.
  auto run_dir = supervisor::claim_run_dir(deps.fs, deps.clock, cfg.run_dir);
  if (!run_dir.ok())
    return fail(run_dir.error().message(),
                run_dir.error().code() == ErrorCode::kFenced ? kExitConfig : kExitFailure);
  for (const auto& line : p.sources) spdlog::info("placement: {}", line);

  supervisor::SupervisorOptions so;
  so.local_node = true;
  so.local_node_id = p.node_rank.value_or(0);
  so.local_address = args.node_address.empty() ? p.rdzv.host : args.node_address;
  so.min_nodes = p.nnodes.min;
  so.max_nodes = p.nnodes.max;
  so.join_window = args.join_window;
  so.write_coordinator_log = true;
  so.coordinator_address = agent::to_string(p.rdzv);
  supervisor::ClusterServerOptions sopt;
  sopt.listen_address = listen_address(p.rdzv.host);
  sopt.port = p.rdzv.port;
  sopt.secret = shared;
  sopt.nproc_per_node = cfg.nproc;

  const bool here = endpoint_is_here(p.rdzv.host, args.node_address);
  const bool coordinator_by_rank = p.node_rank && *p.node_rank == 0 && here;
  std::string join_host;
  if (coordinator_by_rank || (!p.node_rank && here)) {
    // Node rank 0 runs the coordinator; without a rank, whoever binds the endpoint first does.
    supervisor::Supervisor sup(deps, cfg, so);
    supervisor::ClusterServer server(deps, sopt, sup);
    auto bound = server.start();
    if (bound.ok()) {
      auto slurm = SlurmIntegration::attach(deps, cfg, SlurmRole::kDecides);
      CoordinatorOutcome outcome = run_coordinator(production, sup, server, cfg, args, *slurm);
      if (outcome.join_host.empty()) return outcome.exit_code;
      join_host = std::move(outcome.join_host);
    } else if (coordinator_by_rank) {
      return fail("cannot listen on " + agent::to_string(p.rdzv) + ": " + bound.error().message(),
                  kExitFailure);
    } else {
      spdlog::info("the endpoint {} is taken: another node coordinates", agent::to_string(p.rdzv));
    }
  } else if (p.node_rank && *p.node_rank == 0) {
    // Said at once: a user who meant this node to coordinate learns here why it does not.
    spdlog::warn(
        "node rank 0 does not run the coordinator: {} is not an address of this node "
        "(host name {}{}), so it expects a standalone `shardguard coordinator` at {}; "
        "for this node to coordinate, give an endpoint on one of its addresses, or "
        "--node-address {} if that address is this node's",
        p.rdzv.host, host_name(),
        args.node_address.empty() ? std::string() : ", --node-address " + args.node_address,
        agent::to_string(p.rdzv), p.rdzv.host);
  }
  auto slurm = SlurmIntegration::attach(deps, cfg, SlurmRole::kFollows);
  FollowerNode node(production, cfg, shared, args, *slurm, join_host);
  return node.run();
}

}  // namespace shardguard::cli
