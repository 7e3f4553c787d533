// tcp_probe: the two ends of a TCP reachability check, run inside network namespaces.
//   tcp_probe serve PORT                 listen on 0.0.0.0:PORT; answer "ok\n" to each client
//   tcp_probe connect ADDR PORT TIMEOUT_MS
//       exit 0: connected and read "ok"; 2: the timeout passed; 1: any other failure
//       (connection refused, no route, ...), with the reason on stderr.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

int serve(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 16) != 0) {
    std::fprintf(stderr, "tcp_probe: listen on port %d: %s\n", port, std::strerror(errno));
    return 1;
  }
  std::printf("listening on %d\n", port);
  std::fflush(stdout);
  while (true) {
    int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    (void)!::write(c, "ok\n", 3);
    ::close(c);
  }
}

int64_t ms_left(std::chrono::steady_clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                               std::chrono::steady_clock::now())
      .count();
}

int connect_once(const char* host, int port, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
    std::fprintf(stderr, "tcp_probe: bad address '%s'\n", host);
    return 1;
  }
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS) {
    std::fprintf(stderr, "tcp_probe: connect %s:%d: %s\n", host, port, std::strerror(errno));
    return 1;
  }
  pollfd p{fd, POLLOUT, 0};
  if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, ms_left(deadline)))) == 0) {
    std::fprintf(stderr, "tcp_probe: connect %s:%d: timed out after %d ms\n", host, port,
                 timeout_ms);
    return 2;
  }
  int err = 0;
  socklen_t len = sizeof err;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    std::fprintf(stderr, "tcp_probe: connect %s:%d: %s\n", host, port, std::strerror(err));
    return err == ETIMEDOUT ? 2 : 1;
  }
  std::string got;
  p.events = POLLIN;
  while (got.find('\n') == std::string::npos) {
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, ms_left(deadline)))) == 0) {
      std::fprintf(stderr, "tcp_probe: read from %s:%d: timed out\n", host, port);
      return 2;
    }
    char buf[16];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  if (got != "ok\n") {
    std::fprintf(stderr, "tcp_probe: %s:%d answered '%s'\n", host, port, got.c_str());
    return 1;
  }
  std::printf("ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "serve") return serve(std::atoi(argv[2]));
  if (argc == 5 && std::string(argv[1]) == "connect")
    return connect_once(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  std::fprintf(stderr, "usage: tcp_probe serve PORT | tcp_probe connect ADDR PORT TIMEOUT_MS\n");
  return 1;
}
