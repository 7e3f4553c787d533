#include "supervisor/cluster_server.h"

#include <spdlog/spdlog.h>

#include <map>
#include <set>

#include "core/log_limiter.h"
#include "core/overload.h"
#include "core/terminal_text.h"
#include "io/secure_channel.h"
#include "net/crypto.h"
#include "supervisor/node_protocol.h"

namespace shardguard::supervisor {
namespace {

using namespace std::chrono_literals;
}  // namespace

struct ClusterServer::Impl : std::enable_shared_from_this<Impl> {
  io::Deps d;
  ClusterServerOptions opt;
  Supervisor& shell;
  std::unique_ptr<io::SecureChannel> channel;
  std::unique_ptr<Timer> watchdog;
  struct Peer {
    std::optional<NodeId> node;  // once admitted
    SteadyTime last_heard{};
  };
  std::map<io::ConnectionId, Peer> peers;
  std::map<NodeId, io::ConnectionId> conn_of;
  std::map<NodeId, std::string> tokens;  // the token each node id was last welcomed with
  NodeId next_id;
  bool finishing = false;

  // What a node (or anything that got through the handshake) sends wrong is counted past 10
  // lines a second per cause: 20,000 bad node messages had made 20,022 log lines.
  LogLimiter limiter;

  Impl(const io::Deps& deps, ClusterServerOptions o, Supervisor& s)
      : d(deps),
        opt(std::move(o)),
        shell(s),
        next_id(opt.first_free_id),
        limiter(d.clock, {}, nullptr, &d.timers) {}

  void send(io::ConnectionId id, const wire::CoordinatorToNode& m) {
    if (auto st = channel->send(id, wire::encode(m)); !st.ok())
      spdlog::warn("coordinator: to connection {}: {}", id, st.error().message());
  }

  void refuse(io::ConnectionId id, const std::string& why) {
    limiter.warn("coordinator refused a node", "coordinator: refused a node: " + why);
    send(id, wire::Refuse{why});
    channel->close(id);
  }

  void on_message(io::ConnectionId id, const std::string& payload) {
    auto it = peers.find(id);
    if (it == peers.end()) return;
    it->second.last_heard = d.clock.now();
    auto msg = wire::decode_from_node(payload);
    if (!msg.ok()) {
      limiter.warn("coordinator bad message", "coordinator: bad message from connection " +
                                                  std::to_string(id) + ": " +
                                                  msg.error().message());
      return;
    }
    std::visit(
        Overload{[&](wire::Join& j) { on_join(id, it->second, std::move(j)); },
                 [&](const wire::Beat&) {}, [&](const Event& e) { on_event(it->second, e); }},
        *msg);
  }

  void on_join(io::ConnectionId id, Peer& peer, wire::Join j) {
    // Shown in logs and refusals: a node's words are data, never terminal control.
    j.name = escape_for_terminal(j.name);
    j.address = escape_for_terminal(j.address);
    if (peer.node) return refuse(id, "joined twice on one connection");
    if (j.nproc != opt.nproc_per_node)
      return refuse(id, "node '" + j.name + "' runs " + std::to_string(j.nproc) +
                            " rank(s) per node, the job " + std::to_string(opt.nproc_per_node));
    if (!j.job_id.empty() && j.job_id != opt.job_id)
      return refuse(id, "node '" + j.name + "' belongs to job '" + j.job_id + "', not '" +
                            opt.job_id + "'");
    NodeId node;
    if (j.node && !conn_of.contains(*j.node)) {
      node = *j.node;
    } else if (j.node && j.rejoin) {
      // The same node reconnecting before its old connection was seen closed: only the node
      // welcomed under that id (its token) may replace the live connection. Every node holds
      // the secret; without this, any of them could take another's id and speak for it.
      const auto known = tokens.find(*j.node);
      if (known == tokens.end() || j.token.empty() || j.token != known->second)
        return refuse(id, "node " + std::to_string(*j.node) + " ('" + j.name +
                              "') asked for the id of a connected node without its token");
      const io::ConnectionId old = conn_of[*j.node];
      peers.erase(old);
      channel->close(old);
      node = *j.node;
    } else {
      while (conn_of.contains(next_id)) ++next_id;
      node = next_id++;
    }
    // The token a node keeps for its rejoins: the same while it shows it, a new one for a
    // node that comes without it (restarted, or new to this coordinator).
    auto& token = tokens[node];
    if (token.empty() || j.token != token) {
      auto fresh = net::random_hex(32);
      if (!fresh.ok()) return refuse(id, "no token for the node: " + fresh.error().message());
      token = std::move(*fresh);
    }
    peer.node = node;
    conn_of[node] = id;
    send(id, wire::Welcome{node, opt.job_id, token});
    // A node that names no address is reached where its connection came from.
    std::string address = j.address;
    if (address.empty()) {
      address = channel->peer_address(id).value_or("");
      if (auto colon = address.rfind(':'); colon != std::string::npos) address.resize(colon);
      if (address.size() >= 2 && address.front() == '[') address = address.substr(1, address.size() - 2);
    }
    spdlog::info("coordinator: node {} ('{}', {}) joined", node, j.name, address);
    std::weak_ptr<Impl> weak = weak_from_this();
    shell.add_node(
        node, address,
        [weak, id](const Command& c) {
          if (auto p = weak.lock()) p->send(id, c);
        },
        j.epoch);
  }

  void on_event(Peer& peer, Event e) {
    if (!peer.node) return;
    const NodeId node = *peer.node;
    // A node speaks only for itself.
    std::visit(Overload{[&](event::NodeLaunched& x) { x.node = node; },
                        [&](event::LaunchFailed& x) { x.node = node; },
                        [&](event::NodeStopped& x) { x.node = node; },
                        [&](event::Notice& x) {
                          x.node = node;
                          x.id = (uint64_t{node} << 32) | (x.id & 0xffffffffu);
                        },
                        [&](event::NodeUnhealthy& x) { x.node = node; },
                        [&](auto&) {}},
               e);
    shell.node_event(node, std::move(e));
  }

  void on_closed(io::ConnectionId id, const std::string& reason) {
    auto it = peers.find(id);
    if (it == peers.end()) return;
    const std::optional<NodeId> node = it->second.node;
    peers.erase(it);
    if (!node || finishing) return;
    if (auto c = conn_of.find(*node); c != conn_of.end() && c->second == id) {
      conn_of.erase(c);
      spdlog::warn("coordinator: node {} lost: {}", *node, reason);
      shell.remove_node(*node, "connection closed: " + reason);
    }
  }

  void check_heartbeats() {
    const SteadyTime now = d.clock.now();
    std::vector<io::ConnectionId> silent;
    for (const auto& [id, p] : peers)
      if (p.node && now - p.last_heard > opt.heartbeat_timeout) silent.push_back(id);
    for (io::ConnectionId id : silent) {
      const NodeId node = *peers[id].node;
      peers.erase(id);
      conn_of.erase(node);
      channel->close(id);
      spdlog::warn("coordinator: node {} lost: silent for {} ms", node,
                   std::chrono::duration_cast<std::chrono::milliseconds>(opt.heartbeat_timeout).count());
      shell.remove_node(node, "no heartbeat for " +
                                  std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                     opt.heartbeat_timeout)
                                                     .count()) +
                                  " ms");
    }
    arm_watchdog();
  }

  void arm_watchdog() { watchdog->arm(250ms, [this] { check_heartbeats(); }); }
};

ClusterServer::ClusterServer(const io::Deps& deps, ClusterServerOptions options, Supervisor& shell)
    : impl_(std::make_shared<Impl>(deps, std::move(options), shell)) {
  io::SecureChannelOptions o;
  o.secret = impl_->opt.secret;
  o.name = impl_->opt.name;
  o.uniform01 = deps.random.as_function();
  Impl* p = impl_.get();
  o.on_connected = [p](io::ConnectionId id, const std::string&) {
    p->peers[id] = Impl::Peer{std::nullopt, p->d.clock.now()};
  };
  o.on_message = [p](io::ConnectionId id, std::string payload) { p->on_message(id, payload); };
  o.on_closed = [p](io::ConnectionId id, const std::string& reason) { p->on_closed(id, reason); };
  impl_->channel = std::make_unique<io::SecureChannel>(deps.loop, std::move(o));
  impl_->watchdog = deps.timers.make_timer();
}

ClusterServer::~ClusterServer() { impl_->watchdog->cancel(); }

Result<uint16_t> ClusterServer::start() {
  SG_ASSIGN_OR_RETURN(uint16_t port, impl_->channel->listen(impl_->opt.listen_address, impl_->opt.port));
  impl_->arm_watchdog();
  return port;
}

void ClusterServer::set_job_id(const std::string& job_id) { impl_->opt.job_id = job_id; }

void ClusterServer::finish(int exit_code, const std::string& summary) {
  Impl& m = *impl_;
  m.finishing = true;
  m.watchdog->cancel();
  for (const auto& [id, peer] : m.peers)
    if (peer.node) m.send(id, wire::Finish{exit_code, summary});
}

void ClusterServer::stop() {
  impl_->watchdog->cancel();
  impl_->finishing = true;
  impl_->channel->stop();
}

size_t ClusterServer::nodes() const { return impl_->conn_of.size(); }

}  // namespace shardguard::supervisor
