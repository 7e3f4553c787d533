// FaultProxy between clients and a small HTTP/1.1 upstream run by this file: transparent
// forwarding (raw sockets, parsed with Beast, and libcurl as the product uses it), then each
// fault kind, count and matching semantics, the blackhole and a prompt destructor.
#include "tests/support/fault_proxy.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace shardguard::testing {
namespace {

namespace http = boost::beast::http;
using SteadyClock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

std::string random_bytes(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(gen());
  return out;
}

// ---- Socket helpers for the upstream and the raw client (blocking, with poll timeouts) ---

bool wait_fd(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, timeout_ms) > 0;
}

bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    if (!wait_fd(fd, POLLOUT, 5000)) return false;
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// One recv() into `buf`; false on EOF, error, or nothing within timeout_ms.
bool recv_some(int fd, std::string& buf, int timeout_ms) {
  if (!wait_fd(fd, POLLIN, timeout_ms)) return false;
  char chunk[65536];
  ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
  if (n <= 0) return false;
  buf.append(chunk, static_cast<size_t>(n));
  return true;
}

int listen_loopback(uint16_t* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(fd, 64) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  *port = ntohs(addr.sin_port);
  return fd;
}

int connect_loopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

// Feeds `buf` to a Beast parser, reading more from `fd`, until `done()`; false on EOF (after
// put_eof for a close-delimited message), a parse error or `timeout_ms` without bytes.
template <class Parser, class Done>
bool parse_from(int fd, std::string& buf, Parser& p, Done done, int timeout_ms,
                const std::atomic<bool>* stop = nullptr) {
  while (!done()) {
    if (!buf.empty()) {
      boost::beast::error_code ec;
      size_t n = p.put(boost::asio::buffer(buf.data(), buf.size()), ec);
      buf.erase(0, n);
      if (ec && ec != http::error::need_more) return false;
      if (n > 0) continue;
    }
    auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
    bool got = false;
    while (!got && SteadyClock::now() < deadline && !(stop && *stop)) {
      if (wait_fd(fd, POLLIN, 20)) {
        got = recv_some(fd, buf, 0);
        if (!got) {  // EOF or reset
          boost::beast::error_code ec;
          p.put_eof(ec);
          return !ec && done();
        }
      }
    }
    if (!got) return false;
  }
  return true;
}

// ---- The upstream: an HTTP/1.1 object server on loopback --------------------------------
//
// GET/HEAD/PUT/DELETE on objects; GET ?chunked answers chunked, ?close close-delimited;
// /status/304 and /hang (never answers). Expect: 100-continue gets 100 Continue.
class Upstream {
 public:
  struct Seen {
    std::string method, target;
    bool expect = false;
    size_t body_bytes = 0;
  };

  Upstream() {
    listener_ = listen_loopback(&port_);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~Upstream() {
    stop_ = true;
    acceptor_.join();
    for (auto& t : connections_) t.join();
    ::close(listener_);
  }

  uint16_t port() const { return port_; }
  int connections() const { return accepted_; }
  void put(const std::string& path, std::string body) {
    std::lock_guard lock(mu_);
    objects_[path] = std::move(body);
  }
  std::optional<std::string> object(const std::string& path) const {
    std::lock_guard lock(mu_);
    auto it = objects_.find(path);
    return it == objects_.end() ? std::nullopt : std::optional(it->second);
  }
  std::vector<Seen> seen() const {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  void accept_loop() {
    while (!stop_) {
      if (!wait_fd(listener_, POLLIN, 20)) continue;
      int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ++accepted_;
      connections_.emplace_back([this, fd] {
        serve(fd);
        ::close(fd);
      });
    }
  }

  void serve(int fd) {
    std::string buf;
    while (!stop_) {
      http::request_parser<http::string_body> p;
      p.body_limit(64 << 20);
      if (!parse_from(
              fd, buf, p, [&] { return p.is_header_done(); }, 60'000, &stop_))
        return;
      bool expect = p.get()[http::field::expect] == "100-continue";
      if (expect && !send_all(fd, "HTTP/1.1 100 Continue\r\n\r\n")) return;
      if (!parse_from(
              fd, buf, p, [&] { return p.is_done(); }, 10'000, &stop_))
        return;
      const auto& req = p.get();
      {
        std::lock_guard lock(mu_);
        seen_.push_back({std::string(req.method_string()), std::string(req.target()), expect,
                         req.body().size()});
      }
      if (!answer(fd, req) || !req.keep_alive()) return;
    }
  }

  // Writes the answer to `req`; false when the connection ends with it.
  bool answer(int fd, const http::request<http::string_body>& req) {
    std::string target(req.target());
    std::string path = target.substr(0, target.find('?'));
    std::string query = path.size() < target.size() ? target.substr(path.size() + 1) : "";
    if (path == "/hang") {
      while (!stop_) std::this_thread::sleep_for(10ms);
      return false;
    }
    if (path == "/status/304")
      return send_all(fd, "HTTP/1.1 304 Not Modified\r\nETag: \"e\"\r\n\r\n");
    if (req.method() == http::verb::put) {
      put(path, req.body());
      return send_all(fd, "HTTP/1.1 200 OK\r\nETag: \"" + std::to_string(req.body().size()) +
                              "\"\r\nContent-Length: 0\r\n\r\n");
    }
    if (req.method() == http::verb::delete_) {
      std::lock_guard lock(mu_);
      objects_.erase(path);
      return send_all(fd, "HTTP/1.1 204 No Content\r\n\r\n");
    }
    auto body = object(path);
    if (!body) {
      std::string missing = "<Error><Code>NoSuchKey</Code></Error>";
      return send_all(fd,
                      "HTTP/1.1 404 Not Found\r\nContent-Type: application/xml\r\n"
                      "Content-Length: " +
                          std::to_string(missing.size()) + "\r\n\r\n" +
                          (req.method() == http::verb::head ? "" : missing));
    }
    if (req.method() == http::verb::head) {
      return send_all(
          fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body->size()) + "\r\n\r\n");
    }
    if (query.find("close") != std::string::npos) {
      send_all(fd, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + *body);
      return false;
    }
    if (query.find("chunked") != std::string::npos) {
      std::string out = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
      for (size_t at = 0, n = 1000; at < body->size(); at += n, n *= 7) {
        std::string piece = body->substr(at, n);
        char size[32];
        std::snprintf(size, sizeof(size), "%zx;ext=1\r\n", piece.size());
        out += size + piece + "\r\n";
      }
      return send_all(fd, out + "0\r\nX-Trailer: t\r\n\r\n");
    }
    return send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body->size()) +
                            "\r\n\r\n" + *body);
  }

  int listener_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread acceptor_;
  std::vector<std::thread> connections_;  // the acceptor's, then the destructor's
  mutable std::mutex mu_;
  std::map<std::string, std::string> objects_;
  std::vector<Seen> seen_;
};

// ---- A raw HTTP client on one socket ----------------------------------------------------

class RawClient {
 public:
  explicit RawClient(uint16_t port) : fd_(connect_loopback(port)) {}
  ~RawClient() { ::close(fd_); }

  bool send(std::string_view data) { return send_all(fd_, data); }
  std::optional<http::response<http::string_body>> read_response(bool head = false,
                                                                 int timeout_ms = 5000) {
    http::response_parser<http::string_body> p;
    p.body_limit(64 << 20);
    p.skip(head);
    if (!parse_from(
            fd_, buf_, p, [&] { return p.is_done(); }, timeout_ms))
      return std::nullopt;
    return p.release();
  }
  // Whether the peer closed (EOF or reset) within timeout_ms; what it still sent is dropped.
  bool closed_by_peer(int timeout_ms) {
    auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
    while (SteadyClock::now() < deadline) {
      if (!wait_fd(fd_, POLLIN, 20)) continue;
      char chunk[65536];
      if (::recv(fd_, chunk, sizeof(chunk), 0) <= 0) return true;
    }
    return false;
  }

 private:
  int fd_;
  std::string buf_;
};

// ---- libcurl, as the S3 client uses it -------------------------------------------------

struct CurlGlobal {
  CurlGlobal() { curl_global_init(CURL_GLOBAL_DEFAULT); }
  ~CurlGlobal() { curl_global_cleanup(); }
};
const CurlGlobal curl_global;

struct Call {
  std::string method = "GET";
  std::string url;
  const std::string* upload = nullptr;  // the PUT body
  bool chunked = false;                 // send it with Transfer-Encoding: chunked
  bool expect = false;                  // Expect: 100-continue (curl waits 10 s for the 100)
  // CURLE_OPERATION_TIMEDOUT after low_speed_time s below low_speed_limit bytes/s. curl
  // averages the speed over up to 5 s, so a limit well above what passed before a stall
  // makes it fire about low_speed_time after the stall.
  long low_speed_time = 0;
  long low_speed_limit = 100 * 1024;
  long timeout_ms = 10'000;
};

struct Reply {
  CURLcode code = CURLE_OK;
  long status = 0;
  std::string body;
  std::string content_type;
  long new_connections = 0;
  double seconds = 0;
  curl_off_t uploaded = 0;
};

class Curl {
 public:
  Curl() : h_(curl_easy_init()) { REQUIRE(h_ != nullptr); }
  ~Curl() { curl_easy_cleanup(h_); }

  Reply perform(const Call& c) {
    curl_easy_reset(h_);  // keeps the connection cache: keep-alive across calls
    Reply r;
    size_t read_at = 0;
    std::pair<const std::string*, size_t*> source{c.upload, &read_at};
    curl_easy_setopt(h_, CURLOPT_URL, c.url.c_str());
    curl_easy_setopt(h_, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h_, CURLOPT_TIMEOUT_MS, c.timeout_ms);
    curl_easy_setopt(h_, CURLOPT_WRITEFUNCTION, &Curl::on_write);
    curl_easy_setopt(h_, CURLOPT_WRITEDATA, &r.body);
    curl_easy_setopt(h_, CURLOPT_EXPECT_100_TIMEOUT_MS, 10'000L);
    if (c.low_speed_time > 0) {
      curl_easy_setopt(h_, CURLOPT_LOW_SPEED_LIMIT, c.low_speed_limit);
      curl_easy_setopt(h_, CURLOPT_LOW_SPEED_TIME, c.low_speed_time);
    }
    curl_slist* headers = curl_slist_append(nullptr, c.expect ? "Expect: 100-continue" : "Expect:");
    if (c.chunked) headers = curl_slist_append(headers, "Transfer-Encoding: chunked");
    curl_easy_setopt(h_, CURLOPT_HTTPHEADER, headers);
    if (c.method == "HEAD") curl_easy_setopt(h_, CURLOPT_NOBODY, 1L);
    if (c.method == "DELETE") curl_easy_setopt(h_, CURLOPT_CUSTOMREQUEST, "DELETE");
    if (c.method == "PUT") {
      curl_easy_setopt(h_, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(h_, CURLOPT_READFUNCTION, &Curl::on_read);
      curl_easy_setopt(h_, CURLOPT_READDATA, &source);
      curl_off_t size = c.chunked ? -1 : static_cast<curl_off_t>(c.upload->size());
      curl_easy_setopt(h_, CURLOPT_INFILESIZE_LARGE, size);
    }
    auto start = SteadyClock::now();
    r.code = curl_easy_perform(h_);
    r.seconds = seconds_since(start);
    curl_slist_free_all(headers);
    curl_easy_getinfo(h_, CURLINFO_RESPONSE_CODE, &r.status);
    curl_easy_getinfo(h_, CURLINFO_NUM_CONNECTS, &r.new_connections);
    curl_easy_getinfo(h_, CURLINFO_SIZE_UPLOAD_T, &r.uploaded);
    char* type = nullptr;
    if (curl_easy_getinfo(h_, CURLINFO_CONTENT_TYPE, &type) == CURLE_OK && type) {
      r.content_type = type;
    }
    return r;
  }

 private:
  static size_t on_write(char* data, size_t size, size_t n, void* out) {
    static_cast<std::string*>(out)->append(data, size * n);
    return size * n;
  }
  static size_t on_read(char* data, size_t size, size_t n, void* in) {
    auto* src = static_cast<std::pair<const std::string*, size_t*>*>(in);
    size_t take = std::min(size * n, src->first->size() - *src->second);
    std::memcpy(data, src->first->data() + *src->second, take);
    *src->second += take;
    return take;
  }

  CURL* h_;
};

// The proxy in front of an upstream holding /b/small and /b/big (1 MiB).
struct Fixture {
  Fixture() {
    upstream.put("/b/small", "hello world");
    upstream.put("/b/big", big);
    auto started = FaultProxy::start("127.0.0.1", upstream.port());
    REQUIRE(started.ok());
    proxy = std::move(started).value();
  }
  std::string url(const std::string& target) const { return proxy->endpoint() + target; }
  Call get(const std::string& target) const { return Call{"GET", url(target)}; }
  Call put(const std::string& target, const std::string& body, bool expect = false) const {
    Call c{"PUT", url(target), &body};
    c.expect = expect;
    return c;
  }

  const std::string big = random_bytes(1 << 20, 1);
  Upstream upstream;
  std::unique_ptr<FaultProxy> proxy;
};

FaultRule rule(FaultRule::Kind kind, std::string method = "", std::string path = "") {
  FaultRule r;
  r.kind = kind;
  r.method = std::move(method);
  r.path_contains = std::move(path);
  return r;
}

bool is_connection_error(CURLcode code) {
  return code == CURLE_SEND_ERROR || code == CURLE_RECV_ERROR || code == CURLE_GOT_NOTHING ||
         code == CURLE_PARTIAL_FILE;
}

// ---- Transparent forwarding ------------------------------------------------------------

TEST_CASE("FaultProxy forwards requests and responses byte for byte on one connection",
          "[integration]") {
  Fixture f;
  RawClient c(f.proxy->port());
  const std::string host = "Host: 127.0.0.1\r\n";

  REQUIRE(c.send("GET /b/small HTTP/1.1\r\n" + host + "\r\n"));
  auto small = c.read_response();
  REQUIRE(small);
  CHECK(small->result_int() == 200);
  CHECK(small->body() == "hello world");

  REQUIRE(c.send("GET /b/big?chunked HTTP/1.1\r\n" + host + "\r\n"));
  auto chunked = c.read_response();
  REQUIRE(chunked);
  CHECK(chunked->chunked());
  CHECK(chunked->body() == f.big);

  REQUIRE(c.send("HEAD /b/big HTTP/1.1\r\n" + host + "\r\n"));
  auto head = c.read_response(/*head=*/true);
  REQUIRE(head);
  CHECK((*head)[http::field::content_length] == std::to_string(f.big.size()));

  REQUIRE(c.send("GET /status/304 HTTP/1.1\r\n" + host + "\r\n"));
  auto not_modified = c.read_response();
  REQUIRE(not_modified);
  CHECK(not_modified->result_int() == 304);

  REQUIRE(c.send("PUT /b/chunked-put HTTP/1.1\r\n" + host +
                 "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n"));
  auto put = c.read_response();
  REQUIRE(put);
  CHECK(put->result_int() == 200);
  CHECK(f.upstream.object("/b/chunked-put") == "hello world");

  REQUIRE(c.send("PUT /b/sized HTTP/1.1\r\n" + host + "Content-Length: 3\r\n\r\nabc"));
  REQUIRE(c.read_response());
  REQUIRE(c.send("DELETE /b/sized HTTP/1.1\r\n" + host + "\r\n"));
  auto deleted = c.read_response();
  REQUIRE(deleted);
  CHECK(deleted->result_int() == 204);

  REQUIRE(c.send("GET /b/chunked-put HTTP/1.1\r\n" + host + "\r\n"));
  auto back = c.read_response();
  REQUIRE(back);
  CHECK(back->body() == "hello world");

  CHECK(f.proxy->connections() == 1);
  CHECK(f.upstream.connections() == 1);
  CHECK(f.proxy->requests() == 8);
  CHECK(f.proxy->request_log() ==
        std::vector<std::string>{"GET /b/small", "GET /b/big?chunked", "HEAD /b/big",
                                 "GET /status/304", "PUT /b/chunked-put", "PUT /b/sized",
                                 "DELETE /b/sized", "GET /b/chunked-put"});
  CHECK(f.proxy->requests_matching("put", "/b/") == 2);
  CHECK(f.proxy->requests_matching("", "chunked") == 2);  // the path only, not the query
}

TEST_CASE("FaultProxy relays a close-delimited response and then closes", "[integration]") {
  Fixture f;
  RawClient c(f.proxy->port());
  REQUIRE(c.send("GET /b/big?close HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto r = c.read_response();
  REQUIRE(r);
  CHECK(r->body() == f.big);
  CHECK(c.closed_by_peer(2000));
}

TEST_CASE("FaultProxy carries libcurl keep-alive, Expect: 100-continue, HEAD and chunked PUT",
          "[integration]") {
  Fixture f;
  Curl curl;
  Reply small = curl.perform(f.get("/b/small"));
  CHECK(small.code == CURLE_OK);
  CHECK(small.body == "hello world");
  Reply big = curl.perform(f.get("/b/big?chunked"));
  CHECK(big.body == f.big);

  const std::string payload = random_bytes(4 << 20, 2);
  Reply put = curl.perform(f.put("/b/payload", payload, /*expect=*/true));
  CHECK(put.code == CURLE_OK);
  CHECK(put.status == 200);
  CHECK(put.seconds < 5.0);  // the 100 Continue came through: curl did not wait 10 s for it
  CHECK(f.upstream.seen().back().expect);
  CHECK(f.upstream.object("/b/payload") == payload);

  Call chunked = f.put("/b/streamed", payload);
  chunked.chunked = true;
  CHECK(curl.perform(chunked).status == 200);
  CHECK(f.upstream.object("/b/streamed") == payload);

  Reply head = curl.perform(Call{"HEAD", f.url("/b/payload")});
  CHECK(head.code == CURLE_OK);
  CHECK(head.status == 200);
  Reply back = curl.perform(f.get("/b/payload"));
  CHECK(back.body == payload);
  CHECK(back.new_connections == 0);
  CHECK(f.proxy->connections() == 1);
  CHECK(f.upstream.connections() == 1);
}

TEST_CASE("FaultProxy answers 502 when the upstream is down", "[integration]") {
  uint16_t port = 0;
  ::close(listen_loopback(&port));  // a port nobody listens on
  auto proxy = FaultProxy::start("127.0.0.1", port);
  REQUIRE(proxy.ok());
  Curl curl;
  CHECK(curl.perform(Call{"GET", (*proxy)->endpoint() + "/b/x"}).status == 502);
}

TEST_CASE("FaultProxy::start refuses an upstream that is not on loopback", "[integration]") {
  auto proxy = FaultProxy::start("192.0.2.1", 80);
  REQUIRE_FALSE(proxy.ok());
  CHECK(proxy.error().code() == ErrorCode::kInvalid);
  CHECK(proxy.error().message().find("192.0.2.1") != std::string::npos);
}

// ---- Status answers, counts and matching -------------------------------------------------

TEST_CASE("FaultProxy answers 503 SlowDown as S3 does, without forwarding", "[integration]") {
  Fixture f;
  Curl curl;
  int id = f.proxy->add(rule(FaultRule::Kind::kStatus, "PUT", "/b/"));
  const std::string body(1000, 'x');

  SECTION("a small PUT: the body is read, the connection kept") {
    Reply r = curl.perform(f.put("/b/key", body));
    CHECK(r.code == CURLE_OK);
    CHECK(r.status == 503);
    CHECK(r.content_type == "application/xml");
    CHECK(r.body.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code>"
                       "<Message>Please reduce your request rate.</Message><RequestId>",
                       0) == 0);
    CHECK(r.body.find("</RequestId></Error>") != std::string::npos);
    CHECK(curl.perform(f.get("/b/small")).body == "hello world");
    CHECK(f.proxy->connections() == 1);
  }
  SECTION("a large PUT with Expect: answered before the body, then Connection: close") {
    const std::string large = random_bytes(2 << 20, 3);
    Reply r = curl.perform(f.put("/b/key", large, /*expect=*/true));
    CHECK(r.status == 503);
    CHECK(r.seconds < 5.0);
    CHECK(curl.perform(f.get("/b/small")).body == "hello world");
    CHECK(f.proxy->connections() == 2);
  }
  CHECK(f.proxy->applied(id) == 1);
  CHECK_FALSE(f.upstream.object("/b/key"));
  for (const auto& seen : f.upstream.seen()) CHECK(seen.method != "PUT");
}

TEST_CASE("FaultProxy answers any S3 error status and code", "[integration]") {
  auto [status, code] = GENERATE(table<int, std::string>(
      {{500, "InternalError"}, {400, "RequestTimeTooSkewed"}, {403, "AccessDenied"}}));
  Fixture f;
  FaultRule r = rule(FaultRule::Kind::kStatus);
  r.status = status;
  r.s3_code = code;
  f.proxy->add(r);
  f.proxy->add(r);
  Curl curl;
  Reply got = curl.perform(f.get("/b/small"));
  CHECK(got.status == status);
  CHECK(got.body.find("<Code>" + code + "</Code>") != std::string::npos);
  Reply head = curl.perform(Call{"HEAD", f.url("/b/small")});  // no body after HEAD
  CHECK(head.status == status);
  CHECK(head.body.empty());
  CHECK(curl.perform(f.get("/b/small")).status == 200);
  CHECK(f.proxy->connections() == 1);
}

TEST_CASE("FaultProxy applies a rule to `count` requests, then traffic is normal",
          "[integration]") {
  Fixture f;
  Curl curl;
  SECTION("count 2") {
    FaultRule r = rule(FaultRule::Kind::kStatus, "GET");
    r.count = 2;
    int id = f.proxy->add(r);
    CHECK(curl.perform(f.get("/b/small")).status == 503);
    CHECK(curl.perform(f.get("/b/small")).status == 503);
    CHECK(curl.perform(f.get("/b/small")).status == 200);
    CHECK(f.proxy->applied(id) == 2);
  }
  SECTION("count -1 until removed, and clear()") {
    FaultRule r = rule(FaultRule::Kind::kStatus, "GET");
    r.count = -1;
    int id = f.proxy->add(r);
    for (int i = 0; i < 5; ++i) CHECK(curl.perform(f.get("/b/small")).status == 503);
    f.proxy->remove(id);
    CHECK(curl.perform(f.get("/b/small")).status == 200);
    CHECK(f.proxy->applied(id) == 5);
    f.proxy->add(r);
    f.proxy->add(r);
    f.proxy->clear();
    CHECK(curl.perform(f.get("/b/small")).status == 200);
  }
  CHECK(f.proxy->applied(999) == 0);
}

TEST_CASE("FaultProxy matches rules by method, path and query, first rule first", "[integration]") {
  Fixture f;
  Curl curl;
  FaultRule part2 = rule(FaultRule::Kind::kStatus, "put", "/b/obj");
  part2.query_contains = "partNumber=2";
  part2.count = -1;
  int first = f.proxy->add(part2);
  part2.status = 500;
  part2.s3_code = "InternalError";
  int second = f.proxy->add(part2);
  const std::string body = "part";
  CHECK(curl.perform(f.put("/b/obj?partNumber=1&uploadId=u", body)).status == 200);
  CHECK(curl.perform(f.get("/b/obj?partNumber=2&uploadId=u")).status == 200);
  CHECK(curl.perform(f.put("/b/other?partNumber=2&uploadId=u", body)).status == 200);
  CHECK(curl.perform(f.put("/b/obj?partNumber=2&uploadId=u", body)).status == 503);
  CHECK(f.proxy->applied(first) == 1);
  CHECK(f.proxy->applied(second) == 0);
  CHECK(f.proxy->requests_matching("PUT", "/b/obj") == 2);
  CHECK(f.proxy->request_log().back() == "PUT /b/obj?partNumber=2&uploadId=u");
}

// ---- Resets, stalls, delays --------------------------------------------------------------

TEST_CASE("FaultProxy resets the connection in the middle of a request body", "[integration]") {
  Fixture f;
  Curl curl;
  FaultRule r = rule(FaultRule::Kind::kResetRequest, "PUT");
  r.after_bytes = 64 * 1024;
  int id = f.proxy->add(r);
  const std::string payload = random_bytes(2 << 20, 4);
  bool expect = GENERATE(false, true);
  Reply got = curl.perform(f.put("/b/cut", payload, expect));
  INFO(curl_easy_strerror(got.code));
  CHECK(is_connection_error(got.code));
  CHECK(f.proxy->applied(id) == 1);
  CHECK(curl.perform(f.put("/b/whole", payload)).status == 200);
  CHECK_FALSE(f.upstream.object("/b/cut"));
  CHECK(f.upstream.object("/b/whole") == payload);
}

TEST_CASE("FaultProxy resets the connection in the middle of a response", "[integration]") {
  Fixture f;
  Curl curl;
  FaultRule r = rule(FaultRule::Kind::kResetResponse, "GET", "/b/big");
  r.after_bytes = GENERATE(uint64_t{0}, uint64_t{100'000});
  f.proxy->add(r);
  Reply got = curl.perform(f.get("/b/big"));
  INFO(curl_easy_strerror(got.code));
  CHECK(is_connection_error(got.code));
  CHECK(got.body.size() < r.after_bytes + 1);
  if (r.after_bytes == 0) CHECK(got.status == 0);  // not a byte of the answer
  CHECK(curl.perform(f.get("/b/big")).body == f.big);
}

TEST_CASE("FaultProxy stalls a response", "[integration]") {
  Fixture f;
  Curl curl;
  FaultRule r = rule(FaultRule::Kind::kStall, "GET", "/b/big");
  r.after_bytes = 50'000;

  SECTION("until removed: curl's low-speed limit fires within its window") {
    int id = f.proxy->add(r);
    Call c = f.get("/b/big");
    c.low_speed_time = 1;
    Reply got = curl.perform(c);
    CHECK(got.code == CURLE_OPERATION_TIMEDOUT);
    CHECK(got.seconds > 0.9);
    CHECK(got.seconds < 4.0);
    CHECK(got.body.size() < 50'000);
    f.proxy->remove(id);
    CHECK(curl.perform(f.get("/b/big")).body == f.big);
  }
  SECTION("for a duration, then the response resumes") {
    r.duration = 400ms;
    f.proxy->add(r);
    Reply got = curl.perform(f.get("/b/big"));
    CHECK(got.body == f.big);
    CHECK(got.seconds >= 0.4);
  }
  SECTION("until released") {
    int id = f.proxy->add(r);
    std::thread releaser([&] {
      std::this_thread::sleep_for(400ms);
      f.proxy->release(id);
    });
    Reply got = curl.perform(f.get("/b/big"));
    releaser.join();
    CHECK(got.body == f.big);
    CHECK(got.seconds >= 0.4);
  }
  SECTION("then a reset") {
    r.duration = 200ms;
    r.reset_after_stall = true;
    f.proxy->add(r);
    Reply got = curl.perform(f.get("/b/big"));
    CHECK(is_connection_error(got.code));
    CHECK(got.seconds >= 0.2);
  }
}

TEST_CASE("FaultProxy stalls a request body: curl's low-speed limit fires on the upload",
          "[integration]") {
  Fixture f;
  Curl curl;
  FaultRule r = rule(FaultRule::Kind::kStallRequest, "PUT");
  r.after_bytes = 64 * 1024;
  f.proxy->add(r);
  const std::string payload = random_bytes(8 << 20, 5);
  Call c = f.put("/b/slow", payload, /*expect=*/true);
  c.low_speed_time = 1;
  // Above what the socket buffers take in before the stall (MBs on loopback), which curl
  // counts as sent; unstalled, the whole payload goes through in milliseconds.
  c.low_speed_limit = static_cast<long>(payload.size());
  Reply got = curl.perform(c);
  INFO("uploaded " << got.uploaded);
  CHECK(got.code == CURLE_OPERATION_TIMEDOUT);
  CHECK(got.uploaded < static_cast<curl_off_t>(payload.size()));
  CHECK(got.seconds < 5.0);
  CHECK_FALSE(f.upstream.object("/b/slow"));
}

TEST_CASE("FaultProxy delays a request", "[integration]") {
  Fixture f;
  Curl curl;
  FaultRule r = rule(FaultRule::Kind::kDelay, "GET");
  r.duration = 300ms;
  int id = f.proxy->add(r);
  Reply slow = curl.perform(f.get("/b/small"));
  CHECK(slow.body == "hello world");
  CHECK(slow.seconds >= 0.3);
  Reply fast = curl.perform(f.get("/b/small"));
  CHECK(fast.seconds < 0.25);
  CHECK(f.proxy->applied(id) == 1);
}

TEST_CASE("FaultProxy's blackhole stops all traffic until switched off", "[integration]") {
  Fixture f;
  Curl warm;
  CHECK(warm.perform(f.get("/b/small")).status == 200);  // a kept-alive connection
  f.proxy->set_blackhole(true);
  Call c = f.get("/b/small");
  c.timeout_ms = 500;
  CHECK(warm.perform(c).code == CURLE_OPERATION_TIMEDOUT);
  Curl fresh;
  CHECK(fresh.perform(c).code == CURLE_OPERATION_TIMEDOUT);

  std::thread opener([&] {
    std::this_thread::sleep_for(300ms);
    f.proxy->set_blackhole(false);
  });
  Reply resumed = fresh.perform(f.get("/b/big"));
  opener.join();
  CHECK(resumed.body == f.big);
  CHECK(resumed.seconds >= 0.25);
  CHECK(warm.perform(f.get("/b/small")).body == "hello world");
}

TEST_CASE("FaultProxy's destructor returns promptly with stalled connections open",
          "[integration]") {
  Fixture f;
  FaultRule stall = rule(FaultRule::Kind::kStallResponse, "GET", "/b/big");
  stall.after_bytes = 1000;
  f.proxy->add(stall);
  RawClient stalled(f.proxy->port());
  REQUIRE(stalled.send("GET /b/big HTTP/1.1\r\nHost: x\r\n\r\n"));
  RawClient hanging(f.proxy->port());  // the upstream never answers
  REQUIRE(hanging.send("GET /hang HTTP/1.1\r\nHost: x\r\n\r\n"));
  RawClient half(f.proxy->port());  // a body that never ends
  REQUIRE(half.send("PUT /b/x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"));
  RawClient idle(f.proxy->port());
  auto deadline = SteadyClock::now() + 5s;
  while (f.proxy->requests() < 3 && SteadyClock::now() < deadline) std::this_thread::sleep_for(5ms);
  REQUIRE(f.proxy->requests() == 3);
  std::this_thread::sleep_for(100ms);
  f.proxy->set_blackhole(true);

  auto start = SteadyClock::now();
  f.proxy.reset();
  CHECK(seconds_since(start) < 1.0);
  CHECK(stalled.closed_by_peer(1000));
  CHECK(idle.closed_by_peer(1000));
}

// ---- Rules as text, and the standalone program -------------------------------------------

TEST_CASE("parse_fault_rule reads key=value specs and names what is wrong", "[integration]") {
  auto r = parse_fault_rule(
      "kind=stall-request, method=PUT,path=/b/,query=partNumber=2,after=65536,ms=250,count=-1,"
      "reset_after_stall=1");
  REQUIRE(r.ok());
  CHECK(r->kind == FaultRule::Kind::kStallRequest);
  CHECK(r->method == "PUT");
  CHECK(r->path_contains == "/b/");
  CHECK(r->query_contains == "partNumber=2");
  CHECK(r->after_bytes == 65536);
  CHECK(r->duration == 250ms);
  CHECK(r->count == -1);
  CHECK(r->reset_after_stall);
  auto status = parse_fault_rule("kind=status,status=500,code=InternalError,message=Oops");
  REQUIRE(status.ok());
  CHECK(status->status == 500);
  CHECK(status->s3_code == "InternalError");
  CHECK(status->s3_message == "Oops");
  CHECK(parse_fault_rule("")->kind == FaultRule::Kind::kStatus);  // 503 SlowDown, once

  auto [spec, says] = GENERATE(table<std::string, std::string>({
      {"kind=explode", "unknown kind 'explode'"},
      {"colour=red", "unknown key 'colour'"},
      {"count=two", "count 'two' is not a number"},
      {"method", "'method' is not key=value"},
      {"status=42", "status 42 is not 100-599"},
  }));
  auto bad = parse_fault_rule(spec);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code() == ErrorCode::kInvalid);
  CHECK(bad.error().message() == "fault rule '" + spec + "': " + says);
}

#ifdef SG_FAULT_PROXY_BIN
// sg_fault_proxy with pipes on its stdin and stdout.
class Program {
 public:
  explicit Program(std::vector<std::string> args) {
    ::signal(SIGPIPE, SIG_IGN);  // a dead program fails send(), not the test binary
    int in[2], out[2];
    REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    args.insert(args.begin(), SG_FAULT_PROXY_BIN);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    REQUIRE(posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&actions);
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  ~Program() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    close_stdin();
    ::close(stdout_);
  }

  bool send(const std::string& line) {
    std::string data = line + "\n";
    return ::write(stdin_, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  }
  void close_stdin() {
    if (stdin_ >= 0) ::close(stdin_);
    stdin_ = -1;
  }
  // The next line it prints, without the newline; nullopt after 5 s or at EOF.
  std::optional<std::string> line() {
    while (buf_.find('\n') == std::string::npos) {
      if (!recv_pipe()) return std::nullopt;
    }
    std::string out = buf_.substr(0, buf_.find('\n'));
    buf_.erase(0, out.size() + 1);
    return out;
  }
  std::optional<std::string> ask(const std::string& command) {
    if (!send(command)) return std::nullopt;
    return line();
  }
  // Its exit status, waiting up to timeout_ms; -1 if still running.
  int wait(int timeout_ms) {
    auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
    while (SteadyClock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(10ms);
    }
    return -1;
  }
  pid_t pid() const { return pid_; }

 private:
  bool recv_pipe() {
    if (!wait_fd(stdout_, POLLIN, 5000)) return false;
    char chunk[4096];
    ssize_t n = ::read(stdout_, chunk, sizeof(chunk));
    if (n <= 0) return false;
    buf_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  std::string buf_;
};

TEST_CASE("sg_fault_proxy takes rules on its command line and commands on stdin", "[integration]") {
  Upstream upstream;
  upstream.put("/b/small", "hello world");
  Program p({"--upstream", "127.0.0.1:" + std::to_string(upstream.port()), "--rule",
             "kind=status,method=GET,count=1"});
  auto listening = p.line();
  REQUIRE(listening);
  REQUIRE(listening->rfind("listening http://127.0.0.1:", 0) == 0);
  std::string endpoint = listening->substr(std::string("listening ").size());
  Curl curl;
  CHECK(curl.perform(Call{"GET", endpoint + "/b/small"}).status == 503);
  CHECK(curl.perform(Call{"GET", endpoint + "/b/small"}).status == 200);
  CHECK(p.ask("add kind=status,status=500,code=InternalError,path=/b/small") == "2");
  Reply internal = curl.perform(Call{"GET", endpoint + "/b/small"});
  CHECK(internal.status == 500);
  CHECK(internal.body.find("<Code>InternalError</Code>") != std::string::npos);
  CHECK(p.ask("applied 2") == "1");
  CHECK(p.ask("stats") == "requests 3 connections 1");
  CHECK(p.ask("log") == "GET /b/small");
  CHECK(p.line() == "GET /b/small");
  CHECK(p.line() == "GET /b/small");
  CHECK(p.line() == "end");
  CHECK(
      p.ask("add kind=nope").value_or("").rfind("error: fault rule 'kind=nope': unknown kind", 0) ==
      0);
  CHECK(p.ask("frobnicate") == "error: unknown command 'frobnicate'");
  CHECK(p.ask("blackhole on") == "ok");
  CHECK(p.ask("blackhole off") == "ok");

  SECTION("quit") {
    REQUIRE(p.send("quit"));
    CHECK(p.wait(2000) == 0);
  }
  SECTION("stdin closed: serves on until SIGTERM") {
    p.close_stdin();
    std::this_thread::sleep_for(100ms);
    CHECK(curl.perform(Call{"GET", endpoint + "/b/small"}).status == 200);
    ::kill(p.pid(), SIGTERM);
    CHECK(p.wait(2000) == 0);
  }
}
#endif

}  // namespace
}  // namespace shardguard::testing
