// SecureChannel's connections: outbound connects with retries, the handshake on either side,
// and frames in and out. The lifecycle and public API are in secure_channel.cc.
#include <spdlog/spdlog.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/write.hpp>

#include "core/units.h"
#include "io/detail/secure_channel_impl.h"

namespace shardguard::io {

namespace {
// One write gathers many small frames, but not too many bytes: the queue limit counts a
// write's bytes until it completes, so smaller writes free the queue more smoothly.
constexpr size_t kMaxBuffersPerWrite = 64;
constexpr size_t kMaxBytesPerWrite = 256 * 1024;
}  // namespace

void SecureChannel::Impl::try_connect(const ConnPtr& c) {
  ++c->attempt;
  c->phase = ConnPhase::kConnecting;
  c->endpoints.clear();
  const uint64_t generation = c->socket_generation;
  arm(c, c->connect_options.connect_timeout, [generation](Impl& s, const ConnPtr& c) {
    if (c->socket_generation == generation && c->phase == ConnPhase::kConnecting) {
      s.connect_failed(c, "timed out after " + format_duration(c->connect_options.connect_timeout));
    }
  });
  error_code ec;
  const auto literal = asio::ip::make_address(c->host, ec);
  if (!ec) {  // a literal address needs no resolver (and no resolver thread)
    c->endpoints.emplace_back(literal, c->port);
    return connect_endpoints(c);
  }
  c->resolver.async_resolve(
      c->host, std::to_string(c->port),
      [self = shared_from_this(), c, generation](error_code ec, tcp::resolver::results_type r) {
        if (self->dead || c->socket_generation != generation) return;
        if (c->phase != ConnPhase::kConnecting) return;
        if (ec) return self->connect_failed(c, "resolve '" + c->host + "': " + ec.message());
        for (const auto& entry : r) c->endpoints.push_back(entry.endpoint());
        self->connect_endpoints(c);
      });
}

void SecureChannel::Impl::connect_endpoints(const ConnPtr& c) {
  const uint64_t generation = c->socket_generation;
  asio::async_connect(
      c->socket, c->endpoints,
      [self = shared_from_this(), c, generation](error_code ec, const tcp::endpoint& ep) {
        if (self->dead || c->socket_generation != generation) return;
        if (c->phase != ConnPhase::kConnecting) return;
        if (ec) return self->connect_failed(c, ec.message());
        c->address = detail::endpoint_text(ep);
        self->start_client_handshake(c);
      });
}

void SecureChannel::Impl::connect_failed(const ConnPtr& c, const std::string& why) {
  const std::string what = "connect to " + c->host + ":" + std::to_string(c->port) + ": " + why;
  error_code ignored;
  ++c->socket_generation;
  c->resolver.cancel();
  c->socket.close(ignored);
  c->client_handshake.reset();
  c->out.clear();
  c->queued = 0;
  c->writing = false;
  if (c->attempt >= c->connect_options.attempts) {
    return close_now(c, what + " (gave up after " + std::to_string(c->attempt) + " attempts)");
  }
  c->phase = ConnPhase::kConnecting;
  const Duration delay = c->backoff->next();
  spdlog::debug("secure channel '{}': {}; retry {} of {} in {}", options.name, what, c->attempt + 1,
                c->connect_options.attempts, format_duration(delay));
  arm(c, delay, [](Impl& s, const ConnPtr& c) { s.try_connect(c); });
}

void SecureChannel::Impl::start_client_handshake(const ConnPtr& c) {
  auto nonce = net::random_nonce();
  if (!nonce.ok()) return close_now(c, nonce.error().message());
  detail::tune_socket(c->socket, options);
  c->phase = ConnPhase::kHandshake;
  c->client_handshake.emplace(options.secret, options.name, *nonce);
  auto hello = c->client_handshake->start();
  if (!hello.ok()) return close_now(c, hello.error().message());
  queue_raw(c, std::move(hello).value());
  arm_handshake_deadline(c);
  read(c);
}

void SecureChannel::Impl::arm_handshake_deadline(const ConnPtr& c) {
  arm(c, options.handshake_timeout, [](Impl& s, const ConnPtr& c) {
    if (c->phase != ConnPhase::kHandshake) return;
    s.handshake_failed(
        c, Error(ErrorCode::kTimeout,
                 "handshake not finished within " + format_duration(s.options.handshake_timeout)));
  });
}

void SecureChannel::Impl::handshake_failed(const ConnPtr& c, const Error& error) {
  ++stats.handshake_failures;
  // kCorrupt: the peer spoke and failed (wrong secret, tampering, not our protocol). The
  // rest (timeouts, hang-ups) may be transient, so an outbound connection tries again.
  const bool refused = error.code() == ErrorCode::kCorrupt;
  const std::string line = describe(*c) + ": handshake failed: " + error.message();
  log_limited(refused ? kHandshakeRefused : kHandshakeIncomplete, line + "; closing");
  if (c->outbound && !refused) return connect_failed(c, "handshake: " + error.message());
  close_now(c, line);
}

void SecureChannel::Impl::on_handshake_bytes(const ConnPtr& c, std::string_view data) {
  c->heard = c->heard || !data.empty();
  auto step = c->outbound ? c->client_handshake->feed(data) : c->server_handshake->feed(data);
  if (!step.ok()) return handshake_failed(c, step.error());
  // The client's response goes out before anything on_connected may send.
  if (!step->to_send.empty()) queue_raw(c, std::move(step->to_send));
  if (step->done) authenticated(c);
}

void SecureChannel::Impl::authenticated(const ConnPtr& c) {
  const net::Session& session =
      c->outbound ? c->client_handshake->session() : c->server_handshake->session();
  auto encoder = net::FrameEncoder::create(session.send, options.max_payload);
  auto decoder = net::FrameDecoder::create(session.recv, options.max_payload);
  if (!encoder.ok()) return close_now(c, encoder.error().message());
  if (!decoder.ok()) return close_now(c, decoder.error().message());
  c->encoder.emplace(std::move(encoder).value());
  c->decoder.emplace(std::move(decoder).value());
  c->peer_name = session.peer_name;
  // Frames the peer sent right behind its last handshake message.
  c->decoder->feed(c->outbound ? c->client_handshake->take_leftover()
                               : c->server_handshake->take_leftover());
  c->client_handshake.reset();
  c->server_handshake.reset();
  c->phase = ConnPhase::kOpen;
  c->owed_close = true;
  disarm(c);
  ++stats.authenticated;
  spdlog::info("secure channel '{}': {} authenticated", options.name, describe(*c));
  if (options.on_connected) options.on_connected(c->id, c->peer_name);
  deliver(c);
}

void SecureChannel::Impl::deliver(const ConnPtr& c) {
  while (!dead && c->phase == ConnPhase::kOpen) {
    auto next = c->decoder->next();
    if (!next.ok()) {
      ++stats.rejected_frames;
      const std::string line = describe(*c) + ": " + next.error().message();
      log_limited(kFrameBase + static_cast<int>(c->decoder->fault()), line + "; closing");
      return close_now(c, "rejected frame: " + next.error().message());
    }
    if (!*next) return;
    ++stats.messages_received;
    if (options.on_message) options.on_message(c->id, std::move(**next));
  }
}

void SecureChannel::Impl::read(const ConnPtr& c) {
  const uint64_t generation = c->socket_generation;
  c->socket.async_read_some(asio::buffer(c->read_buffer),
                            [self = shared_from_this(), c, generation](error_code ec, size_t n) {
                              if (self->dead || c->socket_generation != generation) return;
                              if (c->phase == ConnPhase::kClosed) return;
                              if (c->phase == ConnPhase::kClosing) {  // nothing more is delivered
                                if (ec) return self->finish_close(c);
                                return self->read(c);
                              }
                              if (ec) return self->read_failed(c, ec);
                              const std::string_view data(c->read_buffer.data(), n);
                              if (c->phase == ConnPhase::kHandshake) {
                                self->on_handshake_bytes(c, data);
                              } else {
                                c->decoder->feed(data);
                                self->deliver(c);
                              }
                              if (c->phase == ConnPhase::kHandshake || c->phase == ConnPhase::kOpen)
                                self->read(c);
                            });
}

void SecureChannel::Impl::read_failed(const ConnPtr& c, const error_code& ec) {
  if (c->phase == ConnPhase::kHandshake) {
    Error early =
        c->outbound ? c->client_handshake->closed_early() : c->server_handshake->closed_early();
    return handshake_failed(c, early);
  }
  const std::string reason =
      ec == asio::error::eof ? "connection closed by the peer" : "connection lost: " + ec.message();
  spdlog::debug("secure channel '{}': {}: {}", options.name, describe(*c), reason);
  close_now(c, reason);
}

void SecureChannel::Impl::queue_raw(const ConnPtr& c, std::string bytes) {
  c->queued += bytes.size();
  c->out.push_back(std::move(bytes));
  if (!c->writing) write(c);
}

Status SecureChannel::Impl::queue_frame(const ConnPtr& c, std::string_view payload) {
  auto what = [&] { return "secure channel '" + options.name + "': " + describe(*c); };
  if (payload.size() > options.max_payload) {
    return Error(ErrorCode::kInvalid, what() + ": payload of " + std::to_string(payload.size()) +
                                          " bytes, more than the " +
                                          std::to_string(options.max_payload) + " allowed");
  }
  const size_t size = payload.size() + net::kFrameOverheadBytes;
  if (c->queued > 0 && c->queued + size > options.max_queued_bytes) {
    ++stats.queue_overflows;
    const std::string line = describe(*c) + ": peer is not reading (" + std::to_string(c->queued) +
                             " bytes unsent, limit " + std::to_string(options.max_queued_bytes) +
                             ")";
    log_limited(kQueueOverflow, line + "; closing");
    close_now(c, line);
    return Error(ErrorCode::kIo, what() + ": peer is not reading; connection closed");
  }
  std::string frame;
  SG_RETURN_IF_ERROR(c->encoder->encode_to(payload, frame));
  queue_raw(c, std::move(frame));
  return ok_status();
}

void SecureChannel::Impl::write(const ConnPtr& c) {
  c->writing = true;
  std::vector<asio::const_buffer> buffers;
  size_t n = 0, bytes = 0;
  while (n < c->out.size() && n < kMaxBuffersPerWrite && (n == 0 || bytes < kMaxBytesPerWrite)) {
    buffers.push_back(asio::buffer(c->out[n]));
    bytes += c->out[n++].size();
  }
  const uint64_t generation = c->socket_generation;
  asio::async_write(c->socket, buffers,
                    [self = shared_from_this(), c, n, generation](error_code ec, size_t) {
                      if (self->dead || c->socket_generation != generation) return;
                      c->writing = false;
                      if (c->phase == ConnPhase::kClosed) return;
                      if (ec) {
                        if (c->phase == ConnPhase::kClosing) return self->finish_close(c);
                        return self->close_now(c, "connection lost: write: " + ec.message());
                      }
                      for (size_t i = 0; i < n; ++i) {
                        c->queued -= c->out.front().size();
                        c->out.pop_front();
                      }
                      if (!c->out.empty()) return self->write(c);
                      if (c->phase == ConnPhase::kClosing) self->finish_close(c);
                    });
}

}  // namespace shardguard::io
