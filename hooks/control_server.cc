#include "hooks/control_server.h"

#include <spdlog/spdlog.h>

#include <variant>

#include "io/unix_socket_server.h"

namespace shardguard::hooks {

struct ControlServer::Impl {
  Clock& clock;
  ControlServerOptions opt;
  std::unique_ptr<io::UnixSocketServer> server;
  std::map<io::ConnectionId, uint32_t> rank_of;  // after hello
  std::map<uint32_t, RankStatus> ranks;
  std::map<uint32_t, io::ConnectionId> conn_of;
  Schedule schedule;
  size_t errors = 0;

  Impl(Clock& c, ControlServerOptions o) : clock(c), opt(std::move(o)) {}

  void reply_error(io::ConnectionId id, const std::string& problem) {
    ++errors;
    send(id, ErrorReply{problem});
    if (opt.events.on_protocol_error) opt.events.on_protocol_error(problem);
  }

  void send(io::ConnectionId id, const AgentMessage& m) {
    std::string line = encode(m);
    line.pop_back();
    (void)server->send(id, line);
  }

  void on_line(io::ConnectionId id, const std::string& line) {
    auto msg = decode_job_message(line);
    if (!msg.ok()) {
      reply_error(id, msg.error().message());
      return;
    }
    if (auto* h = std::get_if<Hello>(&*msg)) return on_hello(id, *h);
    auto it = rank_of.find(id);
    if (it == rank_of.end()) {
      reply_error(id, std::string(message_type(*msg)) + " before hello");
      return;
    }
    RankStatus& r = ranks[it->second];
    if (auto* hb = std::get_if<Heartbeat>(&*msg)) {
      r.step = std::max(r.step, hb->step);
      r.last_heartbeat = clock.now();
      // The client heartbeats right after a save: the save no longer blocks this rank.
      if (r.saving && hb->step >= *r.saving) r.saving.reset();
      if (opt.events.on_heartbeat) opt.events.on_heartbeat(r, hb->scalars);
    } else if (auto* b = std::get_if<CheckpointBegin>(&*msg)) {
      r.saving = b->step;
      if (opt.events.on_checkpoint_begin) opt.events.on_checkpoint_begin(r.rank, b->step);
    } else if (auto* pr = std::get_if<Progress>(&*msg)) {
      if (opt.events.on_progress) opt.events.on_progress(r.rank, *pr);
    } else if (auto* w = std::get_if<CheckpointWritten>(&*msg)) {
      if (opt.events.on_written) opt.events.on_written(r.rank, w->step);
    } else if (auto* c = std::get_if<CheckpointCommitted>(&*msg)) {
      r.saving.reset();
      if (opt.events.on_committed) opt.events.on_committed(r.rank, c->step, c->manifest);
    } else if (auto* f = std::get_if<CheckpointFailed>(&*msg)) {
      r.saving.reset();
      if (opt.events.on_failed) opt.events.on_failed(r.rank, f->step, f->error);
    } else if (auto* p = std::get_if<Passed>(&*msg)) {
      if (opt.events.on_passed) opt.events.on_passed(r.rank, p->step);
    } else if (auto* rf = std::get_if<ResumeFailed>(&*msg)) {
      if (opt.events.on_resume_failed) opt.events.on_resume_failed(r.rank, *rf);
    } else if (auto* sig = std::get_if<SignalReceived>(&*msg)) {
      if (opt.events.on_signal) opt.events.on_signal(r.rank, sig->name);
    }
  }

  // The connection stays open but speaks for no rank: everything it sends is refused.
  void refuse(io::ConnectionId id, const std::string& problem) { reply_error(id, problem); }

  void on_hello(io::ConnectionId id, const Hello& h) {
    if (rank_of.contains(id)) return refuse(id, "a connection speaks for one rank: hello again");
    if (auto it = conn_of.find(h.rank); it != conn_of.end())
      return refuse(id, "rank " + std::to_string(h.rank) + " is already connected");
    if (opt.admit) {
      std::optional<pid_t> peer_pid;
      if (auto peer = server->peer(id)) peer_pid = peer->pid;
      if (auto st = opt.admit(h, peer_pid); !st.ok())
        return refuse(id, "hello refused: " + st.error().message());
    }
    RankStatus& r = ranks[h.rank];
    // The pid as this host sees it (a rank in its own PID namespace calls itself 2).
    int64_t pid = h.pid;
    if (auto peer = server->peer(id); peer && peer->pid > 0) pid = peer->pid;
    r = RankStatus{h.rank, pid, h.attempt, 0, SteadyTime{}, true, std::nullopt};
    rank_of[id] = h.rank;
    conn_of[h.rank] = id;
    send(id, schedule);
    if (opt.events.on_hello) opt.events.on_hello(r);
  }

  void on_disconnect(io::ConnectionId id) {
    auto it = rank_of.find(id);
    if (it == rank_of.end()) return;
    const uint32_t rank = it->second;
    rank_of.erase(it);
    if (conn_of[rank] == id) {
      conn_of.erase(rank);
      ranks[rank].connected = false;
      if (opt.events.on_disconnect) opt.events.on_disconnect(rank);
    }
  }
};

ControlServer::ControlServer(io::EventLoop& loop, Clock& clock, ControlServerOptions options)
    : impl_(std::make_unique<Impl>(clock, std::move(options))) {
  io::UnixSocketServerOptions o;
  o.path = impl_->opt.socket_path;
  o.allowed_uid = impl_->opt.allowed_uid;
  o.max_line_bytes = kMaxLineBytes;
  o.max_connections = impl_->opt.max_connections;
  Impl* p = impl_.get();
  o.on_line = [p](io::ConnectionId id, std::string line) { p->on_line(id, line); };
  o.on_disconnect = [p](io::ConnectionId id) { p->on_disconnect(id); };
  impl_->server = std::make_unique<io::UnixSocketServer>(loop, std::move(o));
}

ControlServer::~ControlServer() = default;

Status ControlServer::start() { return impl_->server->start(); }
void ControlServer::stop() { impl_->server->stop(); }

Status ControlServer::send_to(uint32_t rank, const AgentMessage& message) {
  auto it = impl_->conn_of.find(rank);
  if (it == impl_->conn_of.end())
    return Error(ErrorCode::kNotFound, "rank " + std::to_string(rank) + " is not connected");
  impl_->send(it->second, message);
  return {};
}

void ControlServer::reset_ranks() {
  auto conns = impl_->conn_of;
  impl_->conn_of.clear();
  impl_->rank_of.clear();
  impl_->ranks.clear();
  for (const auto& [rank, id] : conns) impl_->server->close(id);
}

size_t ControlServer::send_all(const AgentMessage& message) {
  size_t n = 0;
  for (const auto& [rank, id] : impl_->conn_of) {
    impl_->send(id, message);
    ++n;
  }
  return n;
}

void ControlServer::set_schedule(const Schedule& schedule) {
  impl_->schedule = schedule;
  send_all(schedule);
}

const std::map<uint32_t, RankStatus>& ControlServer::ranks() const { return impl_->ranks; }

uint64_t ControlServer::max_step() const {
  uint64_t m = 0;
  for (const auto& [rank, r] : impl_->ranks) m = std::max(m, r.step);
  return m;
}

size_t ControlServer::protocol_errors() const { return impl_->errors; }
const std::string& ControlServer::socket_path() const { return impl_->server->path(); }

}  // namespace shardguard::hooks
