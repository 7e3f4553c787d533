// Fixtures for SecureChannel tests on loopback: a channel on its own loop thread that records
// every callback (Host), a blocking POSIX peer that can speak the protocol by hand or send raw
// bytes (RawPeer), and a capture of the log lines.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "io/event_loop.h"
#include "io/secure_channel.h"
#include "net/frame.h"
#include "net/handshake.h"
#include "net/secret.h"
#include "tests/support/background.h"

namespace shardguard::testing {

using namespace std::chrono_literals;
using io::ConnectionId;
using SteadyClock = std::chrono::steady_clock;

inline std::shared_ptr<const net::Secret> secret_of(char fill) {
  auto s = net::Secret::from_bytes(std::string(40, fill));
  REQUIRE(s.ok());
  return std::make_shared<const net::Secret>(std::move(s).value());
}

// Every log line of the test binary, newest last.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(4096)) {
    previous_ = spdlog::default_logger();
    auto logger = std::make_shared<spdlog::logger>("capture", sink_);
    logger->set_level(spdlog::level::debug);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::vector<std::string> lines() { return sink_->last_formatted(); }
  size_t count(const std::string& needle) {
    size_t n = 0;
    for (const auto& l : lines()) n += l.find(needle) != std::string::npos;
    return n;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
  std::shared_ptr<spdlog::logger> previous_;
};

// A SecureChannel on its own loop thread; every callback is recorded under a lock.
class Host {
 public:
  using Tweak = std::function<void(io::SecureChannelOptions&)>;

  Host(std::string name, std::shared_ptr<const net::Secret> secret, const Tweak& tweak = {}) {
    io::SecureChannelOptions o;
    o.secret = std::move(secret);
    o.name = std::move(name);
    o.on_connected = [this](ConnectionId id, const std::string& peer) {
      record([&] { connected_[id] = peer; });
    };
    o.on_message = [this](ConnectionId id, std::string payload) {
      record([&] { messages_[id].push_back(std::move(payload)); });
      if (on_message) on_message(id, messages_count(id));
    };
    o.on_closed = [this](ConnectionId id, const std::string& reason) {
      record([&] {
        closed_[id] = reason;
        closed_at_[id] = SteadyClock::now();
      });
    };
    if (tweak) tweak(o);
    channel_ = std::make_unique<io::SecureChannel>(loop_, std::move(o));
    thread_ = std::thread([this] {
      while (!stopping_) loop_.run_until([this] { return stopping_.load(); }, 50ms);
    });
  }
  ~Host() {
    call([this] { channel_.reset(); });
    stopping_ = true;
    loop_.stop();
    thread_.join();
  }

  // Runs `fn` on the loop thread and waits for it (at most 5 s).
  void call(const std::function<void()>& fn) {
    std::promise<void> done;
    loop_.post([&] {
      fn();
      done.set_value();
    });
    REQUIRE(done.get_future().wait_for(5s) == std::future_status::ready);
  }
  io::SecureChannel& channel() { return *channel_; }

  uint16_t listen(const std::string& address = "127.0.0.1") {
    Result<uint16_t> port = Error(ErrorCode::kInternal, "not run");
    call([&] { port = channel_->listen(address, 0); });
    REQUIRE(port.ok());
    return *port;
  }
  ConnectionId connect(uint16_t port, const std::string& host = "127.0.0.1",
                       io::ConnectOptions options = {}) {
    Result<ConnectionId> id = Error(ErrorCode::kInternal, "not run");
    call([&] { id = channel_->connect(host, port, options); });
    REQUIRE(id.ok());
    return *id;
  }
  Status send(ConnectionId id, const std::string& payload) {
    Status st;
    call([&] { st = channel_->send(id, payload); });
    return st;
  }
  io::SecureChannelStats stats() {
    io::SecureChannelStats s;
    call([&] { s = channel_->stats(); });
    return s;
  }

  // Waits until `pred` holds over the recorded state (checked under the lock).
  bool wait(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 5s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, pred);
  }
  bool wait_connected(size_t n = 1, std::chrono::milliseconds t = 5s) {
    return wait([&] { return connected_.size() >= n; }, t);
  }
  bool wait_closed(ConnectionId id, std::chrono::milliseconds t = 5s) {
    return wait([&] { return closed_.count(id) > 0; }, t);
  }
  bool wait_any_closed(size_t n = 1, std::chrono::milliseconds t = 5s) {
    return wait([&] { return closed_.size() >= n; }, t);
  }
  bool wait_messages(ConnectionId id, size_t n, std::chrono::milliseconds t = 5s) {
    return wait([&] { return messages_[id].size() >= n; }, t);
  }

  // Snapshots (take the lock).
  std::map<ConnectionId, std::string> connected() {
    return locked([&] { return connected_; });
  }
  std::map<ConnectionId, std::string> closed() {
    return locked([&] { return closed_; });
  }
  std::vector<std::string> messages(ConnectionId id) {
    return locked([&] { return messages_[id]; });
  }
  size_t total_messages() {
    return locked([&] {
      size_t n = 0;
      for (const auto& [id, m] : messages_) n += m.size();
      return n;
    });
  }
  std::string closed_reason(ConnectionId id) {
    return locked([&] { return closed_[id]; });
  }
  SteadyClock::time_point closed_at(ConnectionId id) {
    return locked([&] { return closed_at_[id]; });
  }
  ConnectionId first_connected() {
    return locked([&] { return connected_.empty() ? ConnectionId{0} : connected_.begin()->first; });
  }

  // Called on the loop thread after each message is recorded (e.g. to echo).
  std::function<void(ConnectionId, size_t count)> on_message;

 private:
  size_t messages_count(ConnectionId id) {
    return locked([&] { return messages_[id].size(); });
  }
  template <typename Fn>
  auto locked(Fn fn) -> decltype(fn()) {
    std::lock_guard lock(mu_);
    return fn();
  }
  template <typename Fn>
  void record(Fn fn) {
    {
      std::lock_guard lock(mu_);
      fn();
    }
    cv_.notify_all();
  }

  io::EventLoop loop_;
  std::unique_ptr<io::SecureChannel> channel_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<ConnectionId, std::string> connected_;
  std::map<ConnectionId, std::string> closed_;
  std::map<ConnectionId, SteadyClock::time_point> closed_at_;
  std::map<ConnectionId, std::vector<std::string>> messages_;
};

// A blocking TCP client on loopback: raw bytes, or the protocol spoken by hand with net/.
class RawPeer {
 public:
  explicit RawPeer(uint16_t port, bool v6 = false) {
    fd_ = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    int rc;
    if (v6) {
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_port = htons(port);
      a.sin6_addr = in6addr_loopback;
      rc = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(port);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      rc = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    REQUIRE(rc == 0);
  }
  ~RawPeer() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;

  void send_all(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return;  // the other side closed: the tests look at that
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }

  // Bytes that arrive within `timeout` (stops early once `want` bytes are in).
  std::string receive(std::chrono::milliseconds timeout, size_t want = SIZE_MAX) {
    std::string out;
    const auto until = SteadyClock::now() + timeout;
    while (out.size() < want && SteadyClock::now() < until) {
      pollfd p{fd_, POLLIN, 0};
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(until - SteadyClock::now());
      if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 1))) <= 0) continue;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, std::min(sizeof buf, want - out.size()), 0);
      if (n <= 0) {
        eof_ = true;
        break;
      }
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

  // True once the server has closed the connection (EOF or reset) within `timeout`.
  bool closed_by_server(std::chrono::milliseconds timeout) {
    const auto until = SteadyClock::now() + timeout;
    while (!eof_ && SteadyClock::now() < until) receive(10ms);
    return eof_;
  }

  // Runs the client side of the handshake by hand; returns the session (or fails the test).
  net::Session handshake(std::shared_ptr<const net::Secret> secret, const std::string& name) {
    net::ClientHandshake hs(std::move(secret), name, *net::random_nonce());
    auto hello = hs.start();
    REQUIRE(hello.ok());
    send_all(*hello);
    const auto until = SteadyClock::now() + 5s;
    while (!hs.done() && SteadyClock::now() < until) {
      const std::string in = receive(50ms, 1);
      if (in.empty()) continue;
      auto step = hs.feed(in);
      REQUIRE(step.ok());
      if (!step->to_send.empty()) send_all(step->to_send);
    }
    REQUIRE(hs.done());
    return hs.session();
  }

  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  bool eof_ = false;
};

// A free TCP port on 127.0.0.1 at the time of the call (bound, then released).
inline uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace shardguard::testing
