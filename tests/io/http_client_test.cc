// BeastHttpClient against loopback TCP servers written here with plain sockets.
#include "io/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <thread>

#include "io/event_loop.h"

using namespace std::chrono_literals;
using shardguard::ErrorCode;
using shardguard::Result;
using shardguard::io::BeastHttpClient;
using shardguard::io::EventLoop;
using shardguard::io::HttpRequest;
using shardguard::io::HttpResponse;

namespace {

// A listening socket on 127.0.0.1 with an ephemeral port.
struct Listener {
  Listener() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(fd, 16) == 0);
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  ~Listener() { close(); }
  void close() {
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);  // wakes a thread blocked in accept()
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port) + path;
  }
  int fd = -1;
  int port = 0;
};

// Serves one connection: reads the request head (and a Content-Length body), records it,
// answers with `response` and closes.
class OneShotServer {
 public:
  explicit OneShotServer(std::string response) : response_(std::move(response)) {
    thread_ = std::thread([this] { serve(); });
  }
  ~OneShotServer() {
    listener_.close();  // unblocks accept() if no request ever came
    if (thread_.joinable()) thread_.join();
  }
  std::string url(const std::string& path) const { return listener_.url(path); }
  // What the server received; waits for the server thread to finish.
  const std::string& request() {
    if (thread_.joinable()) thread_.join();
    return request_;
  }

 private:
  void serve() {
    const int conn = ::accept(listener_.fd, nullptr, nullptr);
    if (conn < 0) return;
    char buf[4096];
    while (true) {
      const auto head_end = request_.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        size_t body = 0;
        if (auto cl = request_.find("Content-Length: "); cl != std::string::npos) {
          body = std::stoul(request_.substr(cl + 16));
        }
        if (request_.size() >= head_end + 4 + body) break;
      }
      const ssize_t n = ::recv(conn, buf, sizeof buf, 0);
      if (n <= 0) break;
      request_.append(buf, static_cast<size_t>(n));
    }
    ::send(conn, response_.data(), response_.size(), MSG_NOSIGNAL);
    ::close(conn);
  }

  Listener listener_;
  std::string response_;
  std::string request_;
  std::thread thread_;
};

Result<HttpResponse> fetch(HttpRequest request) {
  EventLoop loop;
  BeastHttpClient client(loop);
  std::optional<Result<HttpResponse>> result;
  client.request(std::move(request), [&](Result<HttpResponse> r) { result = std::move(r); });
  CHECK_FALSE(result.has_value());  // never completes inline
  REQUIRE(loop.run_until([&] { return result.has_value(); }, 10s));
  return std::move(*result);
}

}  // namespace

TEST_CASE("http: a 200 with a body, headers both ways", "[integration]") {
  OneShotServer server(
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nETag: \"abc\"\r\nContent-Length: 5\r\n"
      "\r\nhello");
  HttpRequest request;
  request.method = "PUT";
  request.url = server.url("/latest/api/token");
  request.headers.add("X-aws-ec2-metadata-token-ttl-seconds", "21600");
  request.body = "payload";
  auto response = fetch(request);
  REQUIRE(response.ok());
  CHECK(response->status == 200);
  CHECK(response->body == "hello");
  CHECK(response->headers.get("etag") == "\"abc\"");
  CHECK_THAT(server.request(), Catch::StartsWith("PUT /latest/api/token HTTP/1.1\r\n"));
  CHECK_THAT(server.request(), Catch::Contains("X-aws-ec2-metadata-token-ttl-seconds: 21600"));
  CHECK_THAT(server.request(), Catch::Contains("Host: 127.0.0.1:"));
  CHECK_THAT(server.request(), Catch::EndsWith("\r\n\r\npayload"));
}

TEST_CASE("http: a 404 is a response, not an error", "[integration]") {
  OneShotServer server("HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found");
  HttpRequest request;
  request.url = server.url("/latest/meta-data/spot/instance-action");
  auto response = fetch(request);
  REQUIRE(response.ok());
  CHECK(response->status == 404);
  CHECK(response->body == "not found");
}

TEST_CASE("http: a body without Content-Length ends at close", "[integration]") {
  OneShotServer server("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nTRUE");
  HttpRequest request;
  request.url = server.url("/computeMetadata/v1/instance/preempted");
  auto response = fetch(request);
  REQUIRE(response.ok());
  CHECK(response->body == "TRUE");
}

TEST_CASE("http: a server that never answers times out at the deadline", "[integration]") {
  Listener silent;  // the kernel completes the handshake; nobody ever reads or writes
  HttpRequest request;
  request.url = silent.url("/x");
  request.timeout = 200ms;
  const auto start = std::chrono::steady_clock::now();
  auto response = fetch(request);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  REQUIRE_FALSE(response.ok());
  CHECK(response.error().code() == ErrorCode::kTimeout);
  CHECK(response.error().message() == "GET " + request.url + ": timed out after 200ms");
  CHECK(elapsed >= 190ms);
  CHECK(elapsed < 2s);
}

TEST_CASE("http: a closed port is connection refused, naming the URL", "[integration]") {
  std::string url;
  {
    Listener gone;
    url = gone.url("/x");
  }
  HttpRequest request;
  request.url = url;
  auto response = fetch(request);
  REQUIRE_FALSE(response.ok());
  CHECK(response.error().code() == ErrorCode::kIo);
  CHECK_THAT(response.error().message(), Catch::StartsWith("GET " + url + ": "));
  CHECK_THAT(response.error().message(), Catch::Contains("refused"));
}

TEST_CASE("http: a bad URL fails through the callback", "[integration]") {
  HttpRequest request;
  request.url = "https://example.com/";
  auto response = fetch(request);
  REQUIRE_FALSE(response.ok());
  CHECK(response.error().code() == ErrorCode::kInvalid);
  CHECK_THAT(response.error().message(), Catch::Contains("https://example.com/"));
}

TEST_CASE("http: a body over the limit fails the request", "[integration]") {
  OneShotServer server("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + std::string(100, 'x'));
  HttpRequest request;
  request.url = server.url("/big");
  request.max_body_bytes = 10;
  auto response = fetch(request);
  REQUIRE_FALSE(response.ok());
  CHECK_THAT(response.error().message(), Catch::Contains("larger than 10 bytes"));
}

TEST_CASE("http: the blocking convenience", "[integration]") {
  OneShotServer server("HTTP/1.1 204 No Content\r\n\r\n");
  HttpRequest request;
  request.url = server.url("/");
  auto response = shardguard::io::http_request_blocking(request);
  REQUIRE(response.ok());
  CHECK(response->status == 204);
}
