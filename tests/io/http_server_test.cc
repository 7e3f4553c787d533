// HttpServer with real sockets (issue 11): routes, and the limits a local user can hit -
// idle connections, slow clients, 1,500 connections at once, and accept() failing with
// EMFILE - measured by the server thread's CPU time and the process's open descriptors.
#include "io/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <future>
#include <thread>

#include "io/event_loop.h"

using namespace std::chrono_literals;
using shardguard::Duration;
using shardguard::io::EventLoop;
using shardguard::io::HttpReply;
using shardguard::io::HttpServer;
using shardguard::io::HttpServerOptions;
using shardguard::io::HttpServerStats;

namespace {

// The server on its own loop thread; the thread's CPU time is what "pins a core" means.
class HttpRig {
 public:
  explicit HttpRig(HttpServerOptions options = {}) : server_(loop_, "127.0.0.1", 0, options) {
    server_.handle("/metrics", [] { return HttpReply{200, "text/plain", "up 1\n"}; });
    REQUIRE(server_.start().ok());
    thread_ = std::thread(
        [this] { loop_.run_until([this] { return done_.load(); }, std::chrono::hours(1)); });
    // The thread's CPU clock, once it runs.
    REQUIRE(pthread_getcpuclockid(thread_.native_handle(), &cpu_clock_) == 0);
  }
  ~HttpRig() {
    loop_.post([this] { server_.stop(); });
    done_ = true;
    loop_.post([] {});
    thread_.join();
  }
  uint16_t port() const { return server_.port(); }
  HttpServerStats stats() {
    std::promise<HttpServerStats> p;
    loop_.post([&] { p.set_value(server_.stats()); });
    return p.get_future().get();
  }
  Duration cpu_time() const {
    timespec ts{};
    ::clock_gettime(cpu_clock_, &ts);
    return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
  }

 private:
  EventLoop loop_;
  HttpServer server_;
  std::atomic<bool> done_{false};
  std::thread thread_;
  clockid_t cpu_clock_{};
};

sockaddr_in loopback(uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// One blocking exchange: the response text, or "" on any failure or after `timeout`.
std::string http_get(uint16_t port, const std::string& request, std::chrono::milliseconds timeout) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in addr = loopback(port);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    char buf[4096];
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return out;
}

const std::string kGet = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";

size_t open_fds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Lowers this process's soft RLIMIT_NOFILE for the test and restores it after.
class FdLimit {
 public:
  explicit FdLimit(rlim_t soft) {
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved_) == 0);
    rlimit low = saved_;
    low.rlim_cur = soft;
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  }
  ~FdLimit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }

 private:
  rlimit saved_{};
};

// Reads one byte from `fd`, waiting up to `timeout`; -1 if none came.
int read_byte(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return -1;
  unsigned char b = 0;
  return ::read(fd, &b, 1) == 1 ? b : -1;
}

}  // namespace

TEST_CASE("http server: routes, 404 and 405", "[integration]") {
  HttpRig rig;
  CHECK_THAT(http_get(rig.port(), kGet, 5s),
             Catch::StartsWith("HTTP/1.1 200") && Catch::EndsWith("up 1\n"));
  CHECK_THAT(http_get(rig.port(), "GET /nope HTTP/1.1\r\n\r\n", 5s),
             Catch::StartsWith("HTTP/1.1 404"));
  CHECK_THAT(http_get(rig.port(), "DELETE /metrics HTTP/1.1\r\n\r\n", 5s),
             Catch::StartsWith("HTTP/1.1 405"));
  // A request over the size limit is not answered, just closed.
  CHECK(http_get(rig.port(), "GET /metrics HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n",
                 5s)
            .find("up 1") == std::string::npos);
  const auto stats = rig.stats();
  CHECK(stats.served == 3);
  CHECK(stats.open == 0);
}

TEST_CASE("http server: a slow client is closed at max_connection_time", "[integration]") {
  HttpServerOptions options;
  options.max_connection_time = 200ms;
  HttpRig rig(options);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string partial = "GET /metrics HTTP/1.1\r\n";  // and then nothing
  CHECK(http_get(rig.port(), partial, 5s).empty());
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 200ms);
  CHECK(took < 3s);
  CHECK(rig.stats().timed_out == 1);
}

TEST_CASE("http server: 1,500 connections neither pin a core nor exhaust descriptors",
          "[integration]") {
  FdLimit limit(256);
  HttpRig rig;
  const size_t fds_before = open_fds();
  const Duration cpu_before = rig.cpu_time();
  const auto wall_before = std::chrono::steady_clock::now();
  int ready[2];
  REQUIRE(::pipe(ready) == 0);

  // The flood comes from another process with its own descriptor table (and its limit raised
  // back): 1,500 connections that never send a byte, held until it is killed.
  const pid_t flooder = ::fork();
  REQUIRE(flooder >= 0);
  if (flooder == 0) {  // system calls only: the parent has threads
    rlimit r{};
    ::getrlimit(RLIMIT_NOFILE, &r);
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
    sockaddr_in addr = loopback(rig.port());
    int opened = 0;
    for (int i = 0; i < 1500; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      if (fd < 0) break;
      (void)::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
      ++opened;
    }
    const unsigned char n = opened == 1500 ? 1 : 0;
    (void)::write(ready[1], &n, 1);
    ::pause();
    ::_exit(0);
  }
  REQUIRE(read_byte(ready[0], 10s) == 1);

  // While the flood is held open, a scraper still gets its answer.
  size_t peak_fds = 0;
  std::string answer;
  for (int attempt = 0; attempt < 10 && answer.empty(); ++attempt) {
    peak_fds = std::max(peak_fds, open_fds());
    answer = http_get(rig.port(), kGet, 2s);
  }
  CHECK_THAT(answer, Catch::EndsWith("up 1\n"));
  for (int i = 0; i < 20; ++i) {
    peak_fds = std::max(peak_fds, open_fds());
    std::this_thread::sleep_for(50ms);
  }
  const Duration cpu = rig.cpu_time() - cpu_before;
  const Duration wall = std::chrono::steady_clock::now() - wall_before;
  const auto stats = rig.stats();
  ::kill(flooder, SIGKILL);
  ::waitpid(flooder, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);

  WARN("server thread CPU " << std::chrono::duration<double>(cpu).count() << " s over "
                            << std::chrono::duration<double>(wall).count() << " s; peak fds "
                            << peak_fds << " (before " << fds_before << ")");
  CHECK(cpu < wall / 4);                   // a pinned core would be ~wall
  CHECK(peak_fds <= fds_before + 32 + 4);  // max_connections (+1 being accepted, +client)
  CHECK(stats.accept_errors == 0);         // never near EMFILE
  CHECK(stats.accepted >= 1500);           // every one was taken and closed in turn
  CHECK(stats.evicted >= 1500 - 32);
  CHECK(stats.open <= 32);

  // Idle afterwards: nothing spins.
  const Duration idle_before = rig.cpu_time();
  std::this_thread::sleep_for(500ms);
  CHECK(rig.cpu_time() - idle_before < 50ms);
}

TEST_CASE("http server: EMFILE from accept backs off instead of spinning", "[integration]") {
  FdLimit limit(256);
  HttpRig rig;
  int result[2];
  REQUIRE(::pipe(result) == 0);
  // Fill the descriptor table so the server's accept() fails with EMFILE.
  std::vector<int> filler;
  for (int fd; (fd = ::dup(0)) >= 0;) filler.push_back(fd);
  REQUIRE(errno == EMFILE);

  const pid_t client = ::fork();
  REQUIRE(client >= 0);
  if (client == 0) {  // system calls only; frees some of its own copies for its socket
    for (int i = 0; i < 4; ++i) ::close(filler[i]);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = loopback(rig.port());
    unsigned char ok = 0;
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::write(fd, kGet.data(), kGet.size()) == static_cast<ssize_t>(kGet.size())) {
      char buf[512];
      ssize_t n, total = 0;
      while ((n = ::read(fd, buf + total, sizeof buf - 1 - total)) > 0) total += n;
      buf[total] = 0;
      ok = total > 12 && std::memcmp(buf, "HTTP/1.1 200", 12) == 0;
    }
    (void)::write(result[1], &ok, 1);
    ::_exit(0);
  }

  const Duration cpu_before = rig.cpu_time();
  std::this_thread::sleep_for(1500ms);  // the client waits in the backlog meanwhile
  const Duration cpu = rig.cpu_time() - cpu_before;
  const auto during = rig.stats();
  for (int fd : filler) ::close(fd);
  const int ok = read_byte(result[0], 10s);  // served once the backoff ends
  ::waitpid(client, nullptr, 0);
  ::close(result[0]);
  ::close(result[1]);

  WARN("server thread CPU while out of descriptors: " << std::chrono::duration<double>(cpu).count()
                                                      << " s in 1.5 s; accept errors "
                                                      << during.accept_errors);
  CHECK(cpu < 150ms);  // a busy retry would burn ~1.5 s
  CHECK(during.accept_backoffs >= 1);
  CHECK(during.accept_errors <= 8);  // 100, 200, 400, 800 ms...: a handful, not millions
  CHECK(ok == 1);
  CHECK(rig.stats().served == 1);
}
