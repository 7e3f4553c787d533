#include "supervisor/cluster_client.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <map>

#include "core/exit_codes.h"
#include "core/overload.h"
#include "io/secure_channel.h"
#include "supervisor/node_protocol.h"

namespace shardguard::supervisor {
namespace {

using namespace std::chrono_literals;

constexpr size_t kMaxBufferedEvents = 4096;

}  // namespace

struct ClusterClient::Impl : std::enable_shared_from_this<Impl> {
  io::Deps d;
  ClusterClientOptions opt;
  NodeRunner& runner;
  std::unique_ptr<io::SecureChannel> channel;
  std::unique_ptr<Timer> beat_timer, flush_timer, reconnect_timer, alone_timer;
  std::optional<io::ConnectionId> conn;
  bool welcomed_once = false;
  bool in_session = false;  // welcomed on the current connection
  SteadyTime started_at{};
  // Since when no coordinator has been connected (from the start until a first welcome), and
  // since when the current target has been tried.
  std::optional<SteadyTime> away_since, target_since;
  // Failed tries to reach a coordinator are logged at most once a period.
  std::optional<SteadyTime> unreachable_logged_at;
  uint64_t unreachable_unlogged = 0;
  bool finished = false;
  int exit_code = 0;
  bool giving_up = false;
  bool authentication_failed = false;  // a peer at the target failed the secret's handshake
  std::string job_id;
  std::string token;  // the coordinator's token for this node's id, shown when rejoining
  // Steps to forward, by epoch and rank (the newest wins).
  std::map<uint32_t, event::RankStep> pending_steps;  // scalar windows merged
  Epoch pending_epoch = 0;
  std::deque<Event> buffered;  // while away
  std::map<uint64_t, agent::Notice> notices;
  uint64_t next_notice = 1;
  std::function<void(const agent::Notice&)> on_ack;
  std::function<void()> on_away;
  bool away_reported = false;
  bool detached = false;

  Impl(const io::Deps& deps, ClusterClientOptions o, NodeRunner& r)
      : d(deps), opt(std::move(o)), runner(r), job_id(opt.job_id) {}

  void send(const wire::NodeToCoordinator& m) {
    if (!conn || !in_session) return;
    if (auto st = channel->send(*conn, wire::encode(m)); !st.ok())
      spdlog::warn("node: to the coordinator: {}", st.error().message());
  }

  void connect() {
    if (finished || detached) return;
    auto c = channel->connect(opt.host, opt.port, io::ConnectOptions{2s, 1, 100ms, 1s});
    if (!c.ok()) {
      note_unreachable(c.error().message());
      return schedule_reconnect();
    }
    conn = *c;
  }

  void schedule_reconnect() {
    if (finished || detached) return;
    const SteadyTime now = d.clock.now();
    if (!away_since) away_since = now;
    if (!target_since) target_since = now;
    if (now - *away_since > opt.coordinator_timeout) return give_up();
    if (!away_reported && now - *target_since >= opt.takeover_after && on_away) {
      away_reported = true;
      on_away();  // may retarget or detach
      if (detached || finished) return;
    }
    reconnect_timer->arm(500ms, [this] { connect(); });
  }

  void on_connected(io::ConnectionId id) {
    if (!conn || id != *conn) return;
    wire::Join j;
    j.node = welcomed_once ? std::optional<NodeId>(runner.node()) : opt.node_rank;
    j.name = opt.name;
    j.address = opt.address;
    j.nproc = opt.nproc;
    j.job_id = job_id;
    j.epoch = runner.running_epoch();
    j.rejoin = welcomed_once;
    j.token = token;
    // The only message before the welcome.
    if (auto st = channel->send(*conn, wire::encode(wire::NodeToCoordinator(j))); !st.ok())
      spdlog::warn("node: join: {}", st.error().message());
  }

  void on_message(io::ConnectionId id, const std::string& payload) {
    if (!conn || id != *conn) return;
    auto msg = wire::decode_from_coordinator(payload);
    if (!msg.ok()) {
      spdlog::warn("node: bad message from the coordinator: {}", msg.error().message());
      return;
    }
    std::visit(Overload{[&](const wire::Welcome& w) { on_welcome(w); },
                        [&](const Command& c) { on_command(c); },
                        [&](const wire::Finish& f) {
                          spdlog::info("node: the job is over: {} (exit {})", f.summary, f.exit_code);
                          finish(f.exit_code);
                        },
                        [&](const wire::Refuse& r) {
                          spdlog::error("node: the coordinator refused this node: {}", r.why);
                          finish(kExitConfig);
                        }},
               *msg);
  }

  void on_welcome(const wire::Welcome& w) {
    if (welcomed_once && w.node != runner.node())
      spdlog::warn("node: the coordinator renamed this node from {} to {}", runner.node(), w.node);
    runner.set_node(w.node);
    runner.set_job_id(w.job_id);
    job_id = w.job_id;
    token = w.token;
    welcomed_once = true;
    in_session = true;
    authentication_failed = false;
    away_since.reset();
    target_since.reset();
    unreachable_logged_at.reset();
    unreachable_unlogged = 0;
    alone_timer->cancel();  // a stop notice of the absence is the coordinator's to handle now
    away_reported = false;
    spdlog::info("node: joined job '{}' as node {}", w.job_id, w.node);
    while (!buffered.empty()) {
      send(buffered.front());
      buffered.pop_front();
    }
    flush_steps();
  }

  void on_command(const Command& c) {
    if (auto* r = std::get_if<command::Release>(&c)) {
      if (r->node != runner.node()) return;
      spdlog::warn("node: this node leaves the job ({}); the others go on without it", r->why);
      return finish(kExitPreempted);
    }
    if (auto* a = std::get_if<command::AckNotice>(&c)) {
      const uint64_t local = a->notice_id & 0xffffffffu;
      if ((a->notice_id >> 32) != runner.node()) return;
      if (auto it = notices.find(local); it != notices.end() && on_ack) on_ack(it->second);
      return;
    }
    runner.apply(c);
  }

  void on_closed(io::ConnectionId id, const std::string& reason) {
    if (!conn || id != *conn) return;
    const bool was_in_session = in_session;
    conn.reset();
    in_session = false;
    if (finished) return;
    if (reason.find("handshake failed") != std::string::npos &&
        reason.find("waiting for") == std::string::npos) {
      // The peer does not share our secret, or someone altered the exchange. That proves only
      // that whoever answered lacks the secret: anyone on the host can bind a successor's
      // address first. Tried again until coordinator_timeout like any absence; a node that
      // never met a peer holding the secret then ends as misconfigured (78).
      authentication_failed = true;
      note_unreachable("could not authenticate with it: " + reason);
      return schedule_reconnect();
    }
    if (was_in_session)
      spdlog::warn(
          "node: lost the coordinator at {}:{} ({}); the ranks keep training while it is "
          "away, for up to {} s",
          opt.host, opt.port, reason, seconds(opt.coordinator_timeout));
    else
      note_unreachable(reason);
    schedule_reconnect();
  }

  static int64_t seconds(Duration d) {
    return std::chrono::duration_cast<std::chrono::seconds>(d).count();
  }

  // How long the coordinator has been missing, in words.
  std::string absence() const {
    const SteadyTime now = d.clock.now();
    if (!welcomed_once)
      return "none reached since this node started " + std::to_string(seconds(now - started_at)) +
             " s ago";
    return "away for " + std::to_string(away_since ? seconds(now - *away_since) : 0) + " s";
  }

  // A try to reach the coordinator failed: said at once, then at most once a period with the
  // count of the tries in between (a node tries twice a second).
  void note_unreachable(const std::string& reason) {
    const SteadyTime now = d.clock.now();
    if (unreachable_logged_at && now - *unreachable_logged_at < opt.unreachable_log_period) {
      ++unreachable_unlogged;
      return;
    }
    unreachable_logged_at = now;
    const Duration gone = now - away_since.value_or(welcomed_once ? now : started_at);
    const int64_t left = std::max<int64_t>(0, seconds(opt.coordinator_timeout - gone));
    spdlog::warn(
        "node: cannot reach the coordinator at {}:{} ({}); {}{}; this node ends if none "
        "answers within {} s",
        opt.host, opt.port, reason, absence(),
        unreachable_unlogged
            ? ", " + std::to_string(unreachable_unlogged) + " more tries failed since the last line"
            : std::string(),
        left);
    unreachable_unlogged = 0;
  }

  // A notice that this node goes away arrived while no coordinator is connected, so nobody can
  // coordinate an emergency checkpoint. A node that never joined has nothing running and ends
  // now; one whose coordinator is away waits for it as long as the notice allows (it takes the
  // notice over when it comes back), then stops its ranks alone by the deadline.
  void stop_notice_while_away(const agent::Notice& n) {
    if (finished || giving_up || in_session) return;
    if (!welcomed_once) {
      spdlog::warn("node: {} ({}) and no coordinator was ever reached ({}); this node ends",
                   n.detail, n.source, absence());
      return finish(kExitPreempted);
    }
    const WallTime stop_at = n.deadline - opt.term_grace - 1s;
    const auto wait = std::max<Duration>(Duration::zero(), stop_at - d.clock.wall_now());
    spdlog::warn(
        "node: {} ({}) while the coordinator is {}; waiting up to {} ms for it, then "
        "this node stops its ranks alone",
        n.detail, n.source, absence(),
        std::chrono::duration_cast<std::chrono::milliseconds>(wait).count());
    const std::string why = n.detail + " while no coordinator was connected";
    const WallTime deadline = n.deadline;
    alone_timer->arm(wait, [this, why, deadline] {
      if (finished || giving_up || in_session) return;
      giving_up = true;
      spdlog::warn("node: {}: stopping this node's ranks alone", why);
      auto epoch = runner.running_epoch();
      if (!epoch) return finish(kExitPreempted);
      runner.apply(command::TearDown{*epoch, why, deadline});
    });
  }

  void report(Event e) {
    if (auto* h = std::get_if<event::Heartbeats>(&e)) {
      if (h->epoch != pending_epoch) pending_steps.clear();
      pending_epoch = h->epoch;
      for (const auto& r : h->ranks) {
        auto [it, fresh] = pending_steps.try_emplace(r.rank, r);
        if (fresh) continue;
        it->second.step = std::max(it->second.step, r.step);
        it->second.scalars.merge(r.scalars);
      }
      if (!flush_timer->armed()) flush_timer->arm(opt.step_forward_interval, [this] { flush_steps(); });
      return;
    }
    if (giving_up && std::holds_alternative<event::NodeStopped>(e)) return finish(kExitPreempted);
    // Step reports before this event, so the coordinator sees them in order.
    flush_steps();
    if (in_session) return send(e);
    if (buffered.size() < kMaxBufferedEvents) buffered.push_back(std::move(e));
  }

  void flush_steps() {
    flush_timer->cancel();
    if (pending_steps.empty() || !in_session) return;
    event::Heartbeats h{pending_epoch, {}, std::nullopt};
    for (auto& [rank, step] : pending_steps) h.ranks.push_back(std::move(step));
    pending_steps.clear();
    send(Event(std::move(h)));
  }

  void beat() {
    send(wire::Beat{});
    beat_timer->arm(opt.heartbeat, [this] { beat(); });
  }

  // The coordinator stayed away too long: stop the ranks (nobody decides for them any more)
  // and end so that the scheduler can requeue.
  void give_up() {
    if (giving_up) return;
    giving_up = true;
    if (!welcomed_once && authentication_failed) {
      spdlog::error(
          "node: could not authenticate with the coordinator at {}:{} in the {} s of "
          "coordinator_timeout: check that every node has the job's secret file",
          opt.host, opt.port, seconds(opt.coordinator_timeout));
      return finish(kExitConfig);
    }
    if (!welcomed_once)
      spdlog::error(
          "node: no coordinator answered at {}:{} in the {} s of coordinator_timeout "
          "since this node started; this node ends",
          opt.host, opt.port, seconds(opt.coordinator_timeout));
    else
      spdlog::error(
          "node: no coordinator for {} s (coordinator_timeout); stopping this node's ranks",
          seconds(opt.coordinator_timeout));
    auto epoch = runner.running_epoch();
    if (!epoch) return finish(kExitPreempted);
    runner.apply(command::TearDown{*epoch, "no coordinator"});
  }

  void finish(int code) {
    if (finished) return;
    finished = true;
    exit_code = code;
    beat_timer->cancel();
    flush_timer->cancel();
    reconnect_timer->cancel();
    alone_timer->cancel();
    runner.stop();
  }
};

ClusterClient::ClusterClient(const io::Deps& deps, ClusterClientOptions options, NodeRunner& runner)
    : impl_(std::make_shared<Impl>(deps, std::move(options), runner)) {
  io::SecureChannelOptions o;
  o.secret = impl_->opt.secret;
  o.name = impl_->opt.name.empty() ? "node" : impl_->opt.name;
  o.uniform01 = deps.random.as_function();
  Impl* p = impl_.get();
  o.on_connected = [p](io::ConnectionId id, const std::string&) { p->on_connected(id); };
  o.on_message = [p](io::ConnectionId id, std::string payload) { p->on_message(id, payload); };
  o.on_closed = [p](io::ConnectionId id, const std::string& reason) { p->on_closed(id, reason); };
  impl_->channel = std::make_unique<io::SecureChannel>(deps.loop, std::move(o));
  impl_->beat_timer = deps.timers.make_timer();
  impl_->flush_timer = deps.timers.make_timer();
  impl_->reconnect_timer = deps.timers.make_timer();
  impl_->alone_timer = deps.timers.make_timer();
}

ClusterClient::~ClusterClient() {
  impl_->beat_timer->cancel();
  impl_->flush_timer->cancel();
  impl_->reconnect_timer->cancel();
  impl_->alone_timer->cancel();
}

Status ClusterClient::start() {
  impl_->started_at = impl_->d.clock.now();
  impl_->connect();
  impl_->beat();
  return {};
}

void ClusterClient::report(Event event) { impl_->report(std::move(event)); }

void ClusterClient::notice(const agent::Notice& n) {
  Impl& m = *impl_;
  event::Notice e;
  e.node = m.runner.node();
  e.action = n.is_preemption ? NoticeAction::kStop : NoticeAction::kCheckpoint;
  e.source = n.source;
  e.kind = n.kind;
  e.detail = n.detail;
  e.deadline = n.deadline;
  e.preemption = n.is_preemption && n.source != "drain";
  e.id = m.next_notice++;
  m.notices[e.id] = n;
  m.report(e);
  if (n.is_preemption && !m.in_session) m.stop_notice_while_away(n);
}

void ClusterClient::unhealthy(const std::string& evidence, WallTime deadline) {
  impl_->report(event::NodeUnhealthy{impl_->runner.node(), evidence, deadline});
}

void ClusterClient::set_on_acknowledge(std::function<void(const agent::Notice&)> cb) {
  impl_->on_ack = std::move(cb);
}

void ClusterClient::set_on_away(std::function<void()> cb) { impl_->on_away = std::move(cb); }

void ClusterClient::retarget(const std::string& host, uint16_t port) {
  Impl& m = *impl_;
  spdlog::warn("node: the coordinator is now expected at {}:{}", host, port);
  m.opt.host = host;
  m.opt.port = port;
  m.detached = false;
  m.target_since = m.d.clock.now();  // the absence itself goes on (away_since)
  m.away_reported = false;
  m.unreachable_logged_at.reset();  // the first failure at the new target is said at once
  if (!m.conn) {
    m.reconnect_timer->cancel();
    m.connect();
  }
}

void ClusterClient::detach() {
  Impl& m = *impl_;
  m.detached = true;
  m.reconnect_timer->cancel();
  m.beat_timer->cancel();
  if (m.conn) m.channel->close(*m.conn);
}

bool ClusterClient::finished() const { return impl_->finished; }
bool ClusterClient::joined() const { return impl_->welcomed_once; }
int ClusterClient::exit_code() const { return impl_->exit_code; }
const std::string& ClusterClient::job_id() const { return impl_->job_id; }

}  // namespace shardguard::supervisor
