#include "io/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "core/units.h"
#include "io/detail/asio.h"

namespace shardguard::io {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

// One request in flight. Handlers hold a shared_ptr, so the operation lives until the last
// of them has run, whatever happens to the client.
class HttpOperation : public std::enable_shared_from_this<HttpOperation> {
 public:
  HttpOperation(asio::io_context& ctx, HttpRequest request, ParsedUrl url,
                HttpClient::Callback done)
      : resolver_(ctx),
        socket_(ctx),
        deadline_(ctx),
        request_(std::move(request)),
        url_(std::move(url)),
        done_(std::move(done)),
        what_(request_.method + " " + request_.url) {}

  void start() {
    build_request();
    deadline_.expires_after(request_.timeout);
    deadline_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->finished_) return;
      self->timed_out_ = true;
      boost::system::error_code ignored;
      self->resolver_.cancel();
      self->socket_.close(ignored);  // pending operations complete with operation_aborted
    });

    boost::system::error_code ec;
    auto address = asio::ip::make_address(url_.host, ec);
    if (!ec) {  // a literal address needs no resolver (and no resolver thread)
      endpoints_.emplace_back(address, url_.port);
      connect();
      return;
    }
    resolver_.async_resolve(url_.host, std::to_string(url_.port),
                            [self = shared_from_this()](const boost::system::error_code& ec,
                                                        tcp::resolver::results_type results) {
                              if (ec) return self->fail("resolve '" + self->url_.host + "'", ec);
                              for (const auto& entry : results)
                                self->endpoints_.push_back(entry.endpoint());
                              self->connect();
                            });
  }

 private:
  void build_request() {
    http::verb verb = http::string_to_verb(request_.method);
    if (verb == http::verb::unknown) {
      out_.method_string(request_.method);
    } else {
      out_.method(verb);
    }
    out_.target(url_.target);
    out_.version(11);
    for (const auto& [name, value] : request_.headers.fields()) out_.insert(name, value);
    if (!request_.headers.contains("Host")) {
      std::string host =
          url_.host.find(':') != std::string::npos ? "[" + url_.host + "]" : url_.host;
      if (url_.port != 80) host += ":" + std::to_string(url_.port);
      out_.set(http::field::host, host);
    }
    if (!request_.headers.contains("User-Agent")) out_.set(http::field::user_agent, "shardguard");
    out_.set(http::field::connection, "close");
    out_.body() = request_.body;
    if (!request_.body.empty() || verb == http::verb::post || verb == http::verb::put) {
      out_.prepare_payload();
    }
    parser_.body_limit(request_.max_body_bytes);
    if (verb == http::verb::head) parser_.skip(true);
  }

  void connect() {
    asio::async_connect(
        socket_, endpoints_,
        [self = shared_from_this()](const boost::system::error_code& ec, const tcp::endpoint&) {
          if (ec) return self->fail("connect", ec);
          self->write();
        });
  }

  void write() {
    http::async_write(socket_, out_,
                      [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                        if (ec) return self->fail("write", ec);
                        self->read();
                      });
  }

  void read() {
    http::async_read(socket_, buffer_, parser_,
                     [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                       if (ec) return self->fail("read response", ec);
                       self->succeed();
                     });
  }

  void succeed() {
    auto& in = parser_.get();
    HttpResponse response;
    response.status = static_cast<int>(in.result_int());
    for (const auto& field : in) {
      response.headers.add(std::string(field.name_string()), std::string(field.value()));
    }
    response.body = std::move(in.body());
    complete(std::move(response));
  }

  void fail(const std::string& stage, const boost::system::error_code& ec) {
    if (timed_out_) {
      return complete(Error(ErrorCode::kTimeout,
                            what_ + ": timed out after " + format_duration(request_.timeout)));
    }
    if (ec == http::error::body_limit) {
      return complete(Error(ErrorCode::kInvalid, what_ + ": response body larger than " +
                                                     std::to_string(request_.max_body_bytes) +
                                                     " bytes"));
    }
    complete(Error(ErrorCode::kIo, what_ + ": " + stage + ": " + ec.message(), ec.value()));
  }

  void complete(Result<HttpResponse> result) {
    if (finished_) return;
    finished_ = true;
    deadline_.cancel();
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    auto done = std::move(done_);
    done(std::move(result));
  }

  tcp::resolver resolver_;
  tcp::socket socket_;
  asio::steady_timer deadline_;
  HttpRequest request_;
  ParsedUrl url_;
  HttpClient::Callback done_;
  std::string what_;
  std::vector<tcp::endpoint> endpoints_;
  http::request<http::string_body> out_;
  boost::beast::flat_buffer buffer_;
  http::response_parser<http::string_body> parser_;
  bool timed_out_ = false;
  bool finished_ = false;
};

}  // namespace

void BeastHttpClient::request(HttpRequest request, Callback done) {
  asio::io_context& ctx = detail::asio_context(loop_);
  auto url = parse_url(request.url);
  if (!url.ok()) {
    Error error = url.error().context(request.method);
    asio::post(ctx, [done = std::move(done), error = std::move(error)] { done(error); });
    return;
  }
  auto op = std::make_shared<HttpOperation>(ctx, std::move(request), std::move(url).value(),
                                            std::move(done));
  op->start();
}

Result<HttpResponse> http_request_blocking(HttpRequest request) {
  EventLoop loop;
  BeastHttpClient client(loop);
  std::optional<Result<HttpResponse>> result;
  client.request(std::move(request), [&](Result<HttpResponse> r) { result = std::move(r); });
  loop.run();
  if (!result) return Error(ErrorCode::kInternal, "http_request_blocking: no result");
  return std::move(*result);
}

}  // namespace shardguard::io
