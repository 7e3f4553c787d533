#include "io/secure_channel.h"

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>

#include "io/detail/asio.h"
#include "io/detail/secure_channel_impl.h"
#include "io/event_loop.h"

// The channel's lifecycle: options, listening and accepting, closing, logging, and the public
// API. Outbound connections, handshakes and frames are in secure_channel_conn.cc.
namespace shardguard::io {

namespace {

constexpr auto kCloseLinger = std::chrono::seconds(1);

std::string cause_name(int cause) {
  switch (cause) {
    case kHandshakeRefused:
      return "refused handshakes";
    case kHandshakeIncomplete:
      return "incomplete handshakes";
    case kOverCap:
      return "connections over the cap";
    case kQueueOverflow:
      return "queue overflows";
    case kEvicted:
      return "handshakes evicted for newer connections";
    default:
      return std::string(net::frame_fault_name(static_cast<net::FrameFault>(cause - kFrameBase))) +
             " frames";
  }
}

}  // namespace

Status SecureChannel::Impl::check_options() const {
  if (!options.secret) {
    return Error(ErrorCode::kInvalid, "secure channel '" + options.name + "': no shared secret");
  }
  return net::check_peer_name(options.name, "secure channel");
}

std::string SecureChannel::Impl::describe(const SecureConn& c) const {
  std::string text =
      "connection " + std::to_string(c.id) + (c.outbound ? " to " : " from ") + c.address;
  std::string name = c.peer_name;
  if (name.empty() && c.server_handshake) name = c.server_handshake->claimed_name();
  if (!name.empty()) text += " ('" + name + "')";
  return text;
}

void SecureChannel::Impl::log_limited(int cause, const std::string& line) {
  if (limiter.admit(cause, RealClock::instance().now())) {
    spdlog::warn("secure channel '{}': {}", options.name, line);
    return;
  }
  if (!report_armed) arm_report();
}

void SecureChannel::Impl::arm_report() {
  report_armed = true;
  report_timer.expires_after(std::chrono::seconds(1));
  report_timer.async_wait([self = shared_from_this()](error_code ec) {
    self->report_armed = false;
    if (ec || self->dead) return;
    for (const auto& s : self->limiter.take_suppressed(RealClock::instance().now())) {
      spdlog::warn("secure channel '{}': {} more {} not logged", self->options.name, s.count,
                   cause_name(s.cause));
    }
    if (self->limiter.has_suppressed()) self->arm_report();
  });
}

void SecureChannel::Impl::arm(const ConnPtr& c, Duration after, TimerFn fn) {
  const uint64_t generation = ++c->timer_generation;
  c->timer.expires_after(after);
  c->timer.async_wait([self = shared_from_this(), c, generation, fn](error_code ec) {
    if (ec || self->dead || c->timer_generation != generation) return;
    if (c->phase == ConnPhase::kClosed) return;
    fn(*self, c);
  });
}

void SecureChannel::Impl::disarm(const ConnPtr& c) {
  ++c->timer_generation;
  c->timer.cancel();
}

void SecureChannel::Impl::owe_close(const ConnPtr& c, const std::string& reason) {
  if (!c->owed_close) return;
  c->owed_close = false;
  asio::post(ctx, [self = shared_from_this(), id = c->id, reason] {
    if (!self->dead && self->options.on_closed) self->options.on_closed(id, reason);
  });
}

void SecureChannel::Impl::close_now(const ConnPtr& c, const std::string& reason) {
  if (c->phase == ConnPhase::kClosed) return;
  c->phase = ConnPhase::kClosed;
  disarm(c);
  c->resolver.cancel();
  error_code ignored;
  c->socket.close(ignored);
  conns.erase(c->id);
  closing.erase(c->id);
  owe_close(c, reason);
}

void SecureChannel::Impl::finish_close(const ConnPtr& c) {
  if (c->phase == ConnPhase::kClosed) return;
  error_code ignored;
  c->socket.shutdown(tcp::socket::shutdown_send, ignored);
  c->phase = ConnPhase::kClosed;
  disarm(c);
  c->socket.close(ignored);
  closing.erase(c->id);
}

void SecureChannel::Impl::close_gracefully(const ConnPtr& c, const std::string& reason) {
  if (c->phase != ConnPhase::kOpen || c->out.empty()) return close_now(c, reason);
  c->phase = ConnPhase::kClosing;
  conns.erase(c->id);
  closing.emplace(c->id, c);
  owe_close(c, reason);
  arm(c, kCloseLinger, [](Impl& s, const ConnPtr& c) { s.finish_close(c); });
}

void SecureChannel::Impl::accept(tcp::acceptor& acceptor) {
  acceptor.async_accept([self = shared_from_this(), &acceptor](error_code ec, tcp::socket s) {
    if (self->dead || !acceptor.is_open()) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // Out of file descriptors, most likely: try again shortly rather than spin.
      spdlog::warn("secure channel '{}': accept: {}", self->options.name, ec.message());
      self->accept_retry.expires_after(std::chrono::milliseconds(100));
      self->accept_retry.async_wait([self, &acceptor](error_code ec) {
        if (!ec && !self->dead && acceptor.is_open()) self->accept(acceptor);
      });
      return;
    }
    self->admit(std::move(s));
    self->accept(acceptor);
  });
}

size_t SecureChannel::Impl::unauthenticated() const {
  size_t n = 0;
  for (const auto& [id, c] : conns) n += (!c->outbound && c->phase == ConnPhase::kHandshake);
  return n;
}

void SecureChannel::Impl::evict_unauthenticated(const std::string& source) {
  size_t pending = 0, from_source = 0;
  for (const auto& [id, c] : conns) {
    if (c->outbound || c->phase != ConnPhase::kHandshake) continue;
    ++pending;
    from_source += c->source == source;
  }
  const bool source_full = from_source >= options.max_unauthenticated_per_source;
  if (pending < options.max_unauthenticated && !source_full) return;
  // The oldest that sent nothing yet, else the oldest; of this source when it is the one over
  // its share (ids grow with time, and the map is ordered by id).
  ConnPtr victim;
  for (const bool silent_only : {true, false}) {
    for (const auto& [id, c] : conns) {
      if (c->outbound || c->phase != ConnPhase::kHandshake) continue;
      if (source_full && c->source != source) continue;
      if (silent_only && c->heard) continue;
      victim = c;
      break;
    }
    if (victim) break;
  }
  if (!victim) return;
  ++stats.evicted_unauthenticated;
  log_limited(kEvicted, describe(*victim) + " closed unauthenticated for a newer connection: " +
                            std::to_string(pending) + " in the handshake (" +
                            std::to_string(from_source) + " from " + source + "), limits " +
                            std::to_string(options.max_unauthenticated) + " / " +
                            std::to_string(options.max_unauthenticated_per_source) + " per source");
  error_code ignored;
  victim->socket.set_option(tcp::socket::linger(true, 0), ignored);  // RST: no TIME_WAIT
  close_now(victim, "evicted from the handshake slots");
}

void SecureChannel::Impl::admit(tcp::socket socket) {
  ++stats.accepted;
  error_code ec;
  const auto remote = socket.remote_endpoint(ec);
  const std::string address = ec ? std::string("?") : detail::endpoint_text(remote);
  const std::string source = ec ? std::string("?") : remote.address().to_string();
  evict_unauthenticated(source);
  const size_t pending = unauthenticated();
  if (conns.size() >= options.max_connections || pending >= options.max_unauthenticated) {
    ++stats.refused_over_cap;
    log_limited(kOverCap, "connection from " + address +
                              " refused: " + std::to_string(conns.size()) + " connections (" +
                              std::to_string(pending) + " unauthenticated), limits " +
                              std::to_string(options.max_connections) + " / " +
                              std::to_string(options.max_unauthenticated));
    socket.set_option(tcp::socket::linger(true, 0), ec);  // RST: no TIME_WAIT for us
    socket.close(ec);
    return;
  }
  auto nonce = net::random_nonce();
  if (!nonce.ok()) {
    spdlog::error("secure channel '{}': {}", options.name, nonce.error().message());
    socket.close(ec);
    return;
  }
  auto c = std::make_shared<SecureConn>(next_id++, ctx, /*outbound=*/false);
  c->socket = std::move(socket);
  c->address = address;
  c->source = source;
  c->phase = ConnPhase::kHandshake;
  c->server_handshake.emplace(options.secret, options.name, *nonce);
  conns.emplace(c->id, c);
  detail::tune_socket(c->socket, options);
  arm_handshake_deadline(c);
  read(c);
}

void SecureChannel::Impl::shut_down(bool notify) {
  error_code ignored;
  for (auto& a : acceptors) a->close(ignored);
  accept_retry.cancel();
  while (!conns.empty()) {
    ConnPtr c = conns.begin()->second;
    if (!notify) c->owed_close = false;
    close_now(c, "channel stopped");
  }
  while (!closing.empty()) finish_close(ConnPtr(closing.begin()->second));
}

SecureChannel::SecureChannel(EventLoop& loop, SecureChannelOptions options)
    : impl_(std::make_shared<Impl>(detail::asio_context(loop), std::move(options))) {}

SecureChannel::~SecureChannel() {
  impl_->dead = true;
  impl_->shut_down(/*notify=*/false);
  impl_->report_timer.cancel();
}

Result<uint16_t> SecureChannel::listen(const std::string& address, uint16_t port) {
  Impl& s = *impl_;
  SG_RETURN_IF_ERROR(s.check_options());
  error_code ec;
  const auto ip = asio::ip::make_address(address, ec);
  if (ec) {
    return Error(ErrorCode::kInvalid, "secure channel '" + s.options.name + "': listen address '" +
                                          address + "' is not an IPv4 or IPv6 address");
  }
  const tcp::endpoint endpoint(ip, port);
  const std::string what =
      "secure channel '" + s.options.name + "': listen on " + detail::endpoint_text(endpoint);
  auto acceptor = std::make_unique<tcp::acceptor>(s.ctx);
  acceptor->open(endpoint.protocol(), ec);
  // A restarted coordinator must rebind its port while old connections sit in TIME_WAIT.
  if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Error(ErrorCode::kIo, what + ": " + ec.message(), ec.value());
  const uint16_t bound = acceptor->local_endpoint(ec).port();
  if (ec) return Error(ErrorCode::kIo, what + ": " + ec.message(), ec.value());
  s.acceptors.push_back(std::move(acceptor));
  s.accept(*s.acceptors.back());
  spdlog::info("secure channel '{}': listening on {}", s.options.name,
               detail::endpoint_text(tcp::endpoint(ip, bound)));
  return bound;
}

Result<ConnectionId> SecureChannel::connect(const std::string& host, uint16_t port,
                                            ConnectOptions options) {
  Impl& s = *impl_;
  SG_RETURN_IF_ERROR(s.check_options());
  auto c = std::make_shared<SecureConn>(s.next_id++, s.ctx, /*outbound=*/true);
  c->host = host;
  c->port = port;
  c->address = host + ":" + std::to_string(port);
  c->connect_options = options;
  c->connect_options.attempts = std::max(1, options.attempts);
  c->backoff.emplace(policies::BackoffOptions{options.backoff_initial, options.backoff_max},
                     s.options.uniform01);
  if (s.conns.size() >= s.options.max_connections) {
    ++s.stats.refused_over_cap;
    c->phase = ConnPhase::kConnecting;
    s.close_now(c, "connect to " + c->address + ": connection cap of " +
                       std::to_string(s.options.max_connections) + " reached");
    return c->id;
  }
  s.conns.emplace(c->id, c);
  s.try_connect(c);
  return c->id;
}

Status SecureChannel::send(ConnectionId id, std::string_view payload) {
  Impl& s = *impl_;
  auto it = s.conns.find(id);
  if (it == s.conns.end()) {
    return Error(ErrorCode::kNotFound,
                 "secure channel '" + s.options.name + "': no connection " + std::to_string(id));
  }
  const ConnPtr c = it->second;
  if (c->phase != ConnPhase::kOpen) {
    return Error(ErrorCode::kInvalid, "secure channel '" + s.options.name + "': " + s.describe(*c) +
                                          " is not authenticated yet");
  }
  return s.queue_frame(c, payload);
}

void SecureChannel::close(ConnectionId id) {
  auto it = impl_->conns.find(id);
  if (it != impl_->conns.end()) impl_->close_gracefully(ConnPtr(it->second), "closed by this side");
}

void SecureChannel::stop() { impl_->shut_down(/*notify=*/true); }

size_t SecureChannel::connection_count() const { return impl_->conns.size(); }

std::optional<std::string> SecureChannel::peer_address(ConnectionId id) const {
  auto it = impl_->conns.find(id);
  if (it == impl_->conns.end()) return std::nullopt;
  return it->second->address;
}

SecureChannelStats SecureChannel::stats() const { return impl_->stats; }

}  // namespace shardguard::io
