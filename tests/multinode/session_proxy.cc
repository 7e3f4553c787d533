#include "tests/multinode/session_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "net/frame.h"

namespace shardguard::testing::multinode {
namespace {

using namespace std::chrono_literals;

uint64_t be(const std::string& s, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

void send_all(int fd, const std::string& bytes) {
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return;  // the other side is gone: the pump sees it close
    at += static_cast<size_t>(n);
  }
}

int connect_loopback(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

SessionProxy::SessionProxy(uint16_t upstream) : upstream_(upstream) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(listen_fd_, 8) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  port_ = ntohs(a.sin_port);
  thread_ = std::thread([this] { pump(); });
}

SessionProxy::~SessionProxy() {
  stop_ = true;
  thread_.join();
  for (auto& c : conns_) close(c);
  ::close(listen_fd_);
}

size_t SessionProxy::connections() {
  std::lock_guard lock(mu_);
  return conns_.size();
}

std::string SessionProxy::raw(size_t conn) {
  std::lock_guard lock(mu_);
  return conn < conns_.size() ? conns_[conn].raw : "";
}

std::vector<std::string> SessionProxy::frames(size_t conn) {
  std::lock_guard lock(mu_);
  return conn < conns_.size() ? conns_[conn].frames : std::vector<std::string>{};
}

bool SessionProxy::inject(size_t conn, const std::string& bytes,
                          std::chrono::milliseconds timeout) {
  {
    std::lock_guard lock(mu_);
    if (conn >= conns_.size() || conns_[conn].closed) return false;
    conns_[conn].inject = bytes;
  }
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    {
      std::lock_guard lock(mu_);
      if (conns_[conn].inject.empty()) return true;
      if (conns_[conn].closed) return false;
    }
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

void SessionProxy::close(Conn& c) {
  if (c.client >= 0) ::close(c.client);
  if (c.server >= 0) ::close(c.server);
  c.client = c.server = -1;
  c.closed = true;
}

// Forwards the node's complete units only, so that anything injected lands between two.
void SessionProxy::from_client(Conn& c, const char* data, size_t n) {
  c.raw.append(data, n);
  c.pending.append(data, n);
  for (;;) {
    size_t unit = 0;
    if (c.handshake_messages < 2) {  // [u16 length][body]
      if (c.pending.size() < 2) break;
      unit = 2 + be(c.pending, 0, 2);
    } else {  // [u32 length][u64 sequence][payload][MAC]
      if (c.pending.size() < net::kFrameHeaderBytes) break;
      unit = net::kFrameOverheadBytes + be(c.pending, 0, 4);
    }
    if (c.pending.size() < unit) break;
    const std::string whole = c.pending.substr(0, unit);
    c.pending.erase(0, unit);
    if (c.handshake_messages < 2) {
      ++c.handshake_messages;
    } else {
      c.frames.push_back(whole);
    }
    send_all(c.server, whole);
  }
}

void SessionProxy::pump() {
  char buf[65536];
  while (!stop_) {
    std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}};
    {
      std::lock_guard lock(mu_);
      for (auto& c : conns_) {
        if (c.closed) continue;
        if (!c.inject.empty()) {
          send_all(c.server, c.inject);
          c.inject.clear();
        }
        fds.push_back({c.client, POLLIN, 0});
        fds.push_back({c.server, POLLIN, 0});
      }
    }
    if (::poll(fds.data(), fds.size(), 5) <= 0) continue;
    std::lock_guard lock(mu_);
    if (fds[0].revents & POLLIN) {
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client >= 0) {
        Conn c;
        c.client = client;
        c.server = connect_loopback(upstream_);
        if (c.server < 0) close(c);
        conns_.push_back(std::move(c));
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      for (auto& c : conns_) {
        if (c.closed || (fds[i].fd != c.client && fds[i].fd != c.server)) continue;
        const ssize_t got = ::recv(fds[i].fd, buf, sizeof buf, 0);
        if (got <= 0) {
          close(c);
        } else if (fds[i].fd == c.client) {
          from_client(c, buf, static_cast<size_t>(got));
        } else {
          send_all(c.client, std::string(buf, static_cast<size_t>(got)));
        }
        break;
      }
    }
  }
}

}  // namespace shardguard::testing::multinode
