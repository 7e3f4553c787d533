#include "io/http_server.h"

#include <spdlog/spdlog.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "io/detail/asio.h"

namespace shardguard::io {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  asio::io_context& ctx;
  std::string address;
  uint16_t port;
  tcp::acceptor acceptor;
  std::map<std::string, Handler> handlers;

  Impl(asio::io_context& c, std::string a, uint16_t p)
      : ctx(c), address(std::move(a)), port(p), acceptor(c) {}

  struct Session {
    tcp::socket socket;
    beast::flat_buffer buffer;
    http::request<http::string_body> request;
    http::response<http::string_body> response;
    asio::steady_timer deadline;
    explicit Session(asio::io_context& c) : socket(c), deadline(c) {}
  };

  void accept() {
    auto self = shared_from_this();
    acceptor.async_accept([self](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) self->serve(std::move(socket));
      if (self->acceptor.is_open()) self->accept();
    });
  }

  void serve(tcp::socket socket) {
    auto s = std::make_shared<Session>(ctx);
    s->socket = std::move(socket);
    // A slow or silent client gets 5 s, then the connection is closed.
    s->deadline.expires_after(std::chrono::seconds(5));
    s->deadline.async_wait([s](beast::error_code ec) {
      if (!ec) s->socket.close(ec);
    });
    auto self = shared_from_this();
    http::async_read(s->socket, s->buffer, s->request, [self, s](beast::error_code ec, size_t) {
      if (ec) {
        s->deadline.cancel();
        return;
      }
      self->respond(s);
    });
  }

  void respond(const std::shared_ptr<Session>& s) {
    HttpReply reply;
    const auto& req = s->request;
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
    http::async_write(s->socket, s->response, [s](beast::error_code, size_t) {
      beast::error_code ignored;
      s->socket.shutdown(tcp::socket::shutdown_both, ignored);
      s->socket.close(ignored);
      s->deadline.cancel();
    });
  }
};

HttpServer::HttpServer(EventLoop& loop, std::string bind_address, uint16_t port)
    : impl_(std::make_shared<Impl>(detail::asio_context(loop), std::move(bind_address), port)) {}

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
  impl_->accept();
  return {};
}

void HttpServer::stop() {
  beast::error_code ec;
  if (impl_ && impl_->acceptor.is_open()) impl_->acceptor.close(ec);
}

uint16_t HttpServer::port() const { return impl_->port; }

}  // namespace shardguard::io
