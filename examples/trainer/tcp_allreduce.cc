#include "examples/trainer/tcp_allreduce.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace shardguard::example {
namespace {

using Clock = std::chrono::steady_clock;

Status write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Error::from_errno("all-reduce send", errno);
    p += w;
    n -= static_cast<size_t>(w);
  }
  return {};
}

Status read_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return Error(ErrorCode::kIo, "all-reduce: a peer closed its connection");
    if (r < 0) return Error::from_errno("all-reduce recv", errno);
    p += r;
    n -= static_cast<size_t>(r);
  }
  return {};
}

sockaddr_in address_of(const std::string& host, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

}  // namespace

Result<std::unique_ptr<TcpAllReduce>> TcpAllReduce::connect(uint32_t rank, uint32_t world,
                                                            const std::string& master_addr,
                                                            uint16_t master_port,
                                                            std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  const sockaddr_in addr = address_of(master_addr, master_port);
  if (rank == 0) {
    int ls = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(ls, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 || ::listen(ls, 64) != 0) {
      Error e = Error::from_errno("all-reduce: listen on " + master_addr + ":" +
                                      std::to_string(master_port), errno);
      ::close(ls);
      return e;
    }
    std::vector<int> fds(world > 0 ? world - 1 : 0, -1);
    for (uint32_t got = 0; got + 1 < world;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      pollfd p{ls, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
        ::close(ls);
        for (int fd : fds) if (fd >= 0) ::close(fd);
        return Error(ErrorCode::kTimeout, "all-reduce: " + std::to_string(world - 1 - got) +
                                              " rank(s) did not connect");
      }
      int fd = ::accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      uint32_t peer = 0;
      if (!read_all(fd, &peer, sizeof peer).ok() || peer == 0 || peer >= world || fds[peer - 1] >= 0) {
        ::close(fd);
        continue;
      }
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      fds[peer - 1] = fd;
      ++got;
    }
    ::close(ls);
    return std::unique_ptr<TcpAllReduce>(new TcpAllReduce(rank, std::move(fds)));
  }
  for (;;) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (auto st = write_all(fd, &rank, sizeof rank); !st.ok()) {
        ::close(fd);
        return st.error();
      }
      return std::unique_ptr<TcpAllReduce>(new TcpAllReduce(rank, {fd}));
    }
    const int err = errno;
    ::close(fd);
    if (Clock::now() >= until)
      return Error::from_errno("all-reduce: connect to rank 0 at " + master_addr + ":" +
                                   std::to_string(master_port), err);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TcpAllReduce::~TcpAllReduce() {
  for (int fd : fds_) if (fd >= 0) ::close(fd);
}

Result<double> TcpAllReduce::sum(double value) {
  if (rank_ != 0) {
    SG_RETURN_IF_ERROR(write_all(fds_[0], &value, sizeof value));
    double total = 0;
    SG_RETURN_IF_ERROR(read_all(fds_[0], &total, sizeof total));
    return total;
  }
  double total = value;
  for (int fd : fds_) {
    double v = 0;
    SG_RETURN_IF_ERROR(read_all(fd, &v, sizeof v));
    total += v;
  }
  for (int fd : fds_) SG_RETURN_IF_ERROR(write_all(fd, &total, sizeof total));
  return total;
}

}  // namespace shardguard::example
