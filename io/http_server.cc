#include "io/http_server.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <list>
#include <optional>

#include "core/log_limiter.h"
#include "core/units.h"
#include "io/detail/asio.h"
#include "io/event_loop.h"

namespace shardguard::io {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// Out of descriptors or buffers: retrying at once would only spin on the same error.
bool exhausted(const beast::error_code& ec) {
  return ec == asio::error::no_descriptors || ec.value() == ENFILE ||
         ec == asio::error::no_buffer_space || ec == asio::error::no_memory;
}

}  // namespace

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  struct Session;
  using SessionList = std::list<std::shared_ptr<Session>>;

  struct Session {
    Session(asio::io_context& c, size_t max_bytes) : socket(c), buffer(max_bytes), deadline(c) {}
    tcp::socket socket;
    beast::flat_buffer buffer;
    std::optional<http::request_parser<http::string_body>> parser;
    http::response<http::string_body> response;
    asio::steady_timer deadline;
    bool answering = false;  // the request is in: not evicted any more
    bool ended = false;
    SessionList::iterator pos;
  };

  asio::io_context& ctx;
  std::string address;
  uint16_t port;
  HttpServerOptions options;
  AsioTimerFactory timers;
  LogLimiter limiter;
  tcp::acceptor acceptor;
  asio::steady_timer backoff_timer;
  Duration backoff{0};
  bool accepting = false;  // an accept or a backoff is outstanding
  bool stopped = false;
  std::map<std::string, Handler> handlers;
  SessionList sessions;  // oldest first
  HttpServerStats stats;

  Impl(EventLoop& loop, std::string a, uint16_t p, HttpServerOptions o)
      : ctx(detail::asio_context(loop)),
        address(std::move(a)),
        port(p),
        options(o),
        timers(loop),
        limiter(options.clock != nullptr ? *options.clock : RealClock::instance(), {}, nullptr,
                &timers),
        acceptor(ctx),
        backoff_timer(ctx) {}

  std::string where() const { return "http server " + address + ":" + std::to_string(port); }

  // Posts one accept, unless every slot is taken by a connection already being answered
  // (then end() resumes it).
  void accept() {
    if (stopped || accepting || !acceptor.is_open()) return;
    if (full() && !has_evictable()) return;
    accepting = true;
    acceptor.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
      self->accepting = false;
      if (ec == asio::error::operation_aborted || self->stopped) return;
      if (ec) return self->on_accept_error(ec);
      self->backoff = Duration(0);
      self->admit(std::move(socket));
      self->accept();
    });
  }

  void on_accept_error(const beast::error_code& ec) {
    ++stats.accept_errors;
    Duration pause = std::chrono::milliseconds(10);  // a passing error (ECONNABORTED...)
    if (exhausted(ec)) {
      ++stats.accept_backoffs;
      backoff = backoff == Duration(0) ? options.accept_backoff_initial
                                       : std::min(backoff * 2, options.accept_backoff_max);
      pause = backoff;
    }
    limiter.warn("http accept error",
                 where() + ": accept: " + ec.message() + "; pausing " + format_duration(pause));
    accepting = true;
    backoff_timer.expires_after(pause);
    backoff_timer.async_wait([self = shared_from_this()](beast::error_code wait_ec) {
      self->accepting = false;
      if (!wait_ec) self->accept();
    });
  }

  bool full() const {
    return options.max_connections > 0 && sessions.size() >= options.max_connections;
  }
  bool has_evictable() const {
    for (const auto& s : sessions)
      if (!s->answering) return true;
    return false;
  }

  void admit(tcp::socket socket) {
    if (full()) {
      // Make room by closing the oldest connection that still has not sent its request:
      // idle connections cannot keep a scraper out.
      auto victim = std::find_if(sessions.begin(), sessions.end(),
                                 [](const auto& s) { return !s->answering; });
      if (victim == sessions.end()) {
        ++stats.evicted;  // all busy being answered: this one goes instead
        limiter.warn("http full", where() + ": " + std::to_string(sessions.size()) +
                                      " connections busy; closed a new one");
        return;
      }
      ++stats.evicted;
      limiter.warn("http full", where() + ": " + std::to_string(sessions.size()) +
                                    " connections open; closed the oldest idle one");
      end(*victim);
    }
    auto s = std::make_shared<Session>(ctx, options.max_request_bytes);
    s->socket = std::move(socket);
    s->pos = sessions.insert(sessions.end(), s);
    ++stats.accepted;
    s->deadline.expires_after(options.max_connection_time);
    s->deadline.async_wait([self = shared_from_this(), s](beast::error_code ec) {
      if (ec || s->ended) return;
      ++self->stats.timed_out;
      self->limiter.warn("http slow client",
                         self->where() + ": a connection took longer than " +
                             format_duration(self->options.max_connection_time) + "; closed");
      self->end(s);
    });
    s->parser.emplace();
    s->parser->header_limit(
        static_cast<uint32_t>(std::min<size_t>(options.max_request_bytes, 8192)));
    s->parser->body_limit(options.max_request_bytes);
    http::async_read(s->socket, s->buffer, *s->parser,
                     [self = shared_from_this(), s](beast::error_code ec, size_t) {
                       if (s->ended) return;
                       if (ec) return self->end(s);
                       self->respond(s);
                     });
  }

  void respond(const std::shared_ptr<Session>& s) {
    s->answering = true;
    HttpReply reply;
    const auto& req = s->parser->get();
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      reply = {405, "text/plain", "method not allowed\n"};
    } else {
      std::string path(req.target());
      if (auto q = path.find('?'); q != std::string::npos) path.resize(q);
      auto it = handlers.find(path);
      reply = it == handlers.end() ? HttpReply{404, "text/plain", "not found\n"} : it->second();
    }
    s->response.version(req.version());
    s->response.result(static_cast<http::status>(reply.status));
    s->response.set(http::field::content_type, reply.content_type);
    s->response.set(http::field::connection, "close");
    if (req.method() != http::verb::head) s->response.body() = std::move(reply.body);
    s->response.prepare_payload();
    http::async_write(s->socket, s->response,
                      [self = shared_from_this(), s](beast::error_code ec, size_t) {
                        if (s->ended) return;
                        if (!ec) ++self->stats.served;
                        self->end(s);
                      });
  }

  // Closes the connection once, frees its slot and resumes a paused accept.
  void end(std::shared_ptr<Session> s) {  // by value: the list holds the other reference
    if (s->ended) return;
    s->ended = true;
    beast::error_code ignored;
    s->socket.shutdown(tcp::socket::shutdown_both, ignored);
    s->socket.close(ignored);
    s->deadline.cancel();
    sessions.erase(s->pos);
    accept();
  }

  void shut_down() {
    stopped = true;
    beast::error_code ignored;
    acceptor.close(ignored);
    backoff_timer.cancel();
    while (!sessions.empty()) end(sessions.front());
  }
};

HttpServer::HttpServer(EventLoop& loop, std::string bind_address, uint16_t port,
                       HttpServerOptions options)
    : impl_(std::make_shared<Impl>(loop, std::move(bind_address), port, options)) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::handle(const std::string& path, Handler handler) {
  impl_->handlers[path] = std::move(handler);
}

Status HttpServer::start() {
  beast::error_code ec;
  auto addr = asio::ip::make_address(impl_->address, ec);
  if (ec) return Error(ErrorCode::kInvalid, "bad bind address '" + impl_->address + "'");
  tcp::endpoint ep(addr, impl_->port);
  const std::string where = impl_->address + ":" + std::to_string(impl_->port);
  impl_->acceptor.open(ep.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(ep, ec);
  if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Error(ErrorCode::kIo, "listen on " + where + ": " + ec.message());
  impl_->port = impl_->acceptor.local_endpoint().port();
  impl_->stopped = false;
  impl_->accept();
  return {};
}

void HttpServer::stop() {
  if (impl_) impl_->shut_down();
}

uint16_t HttpServer::port() const { return impl_->port; }

HttpServerStats HttpServer::stats() const {
  HttpServerStats out = impl_->stats;
  out.open = impl_->sessions.size();
  return out;
}

}  // namespace shardguard::io
