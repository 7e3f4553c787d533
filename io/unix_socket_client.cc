// Blocking client side of io/unix_socket_server.h, plain POSIX (no Asio): it is linked into
// training processes through hooks/ and must stay small.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "io/detail/unix_address.h"
#include "io/unix_socket_server.h"

namespace shardguard::io {

namespace {
constexpr size_t kMaxBufferedLine = 64 << 20;  // a server gone mad cannot exhaust memory
}

Result<UnixSocketClient> UnixSocketClient::connect(const std::string& path) {
  const std::string what = "connect to unix socket '" + path + "'";
  // A path longer than sun_path is reached through its directory (io/detail/unix_address.h).
  auto address = detail::unix_address(path);
  if (!address.ok()) return std::move(address).error().context(what);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Error::from_errno(what + ": socket", errno);
  int rc;
  do {
    rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&address->addr), address->length);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    ::close(fd);
    return Error::from_errno(what, err);
  }
  return UnixSocketClient(fd, path);
}

UnixSocketClient::UnixSocketClient(UnixSocketClient&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      buffer_(std::move(other.buffer_)) {}

UnixSocketClient& UnixSocketClient::operator=(UnixSocketClient&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    buffer_ = std::move(other.buffer_);
  }
  return *this;
}

UnixSocketClient::~UnixSocketClient() { close(); }

void UnixSocketClient::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status UnixSocketClient::send_line(std::string_view line) {
  if (line.find('\n') != std::string_view::npos) {
    return Error(ErrorCode::kInvalid,
                 "send to unix socket '" + path_ + "': line contains a newline");
  }
  std::string message;
  message.reserve(line.size() + 1);
  message.append(line).push_back('\n');
  return send_raw(message);
}

Status UnixSocketClient::send_raw(std::string_view bytes) {
  if (fd_ < 0) return Error(ErrorCode::kIo, "send to unix socket '" + path_ + "': not connected");
  while (!bytes.empty()) {
    ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error::from_errno("send to unix socket '" + path_ + "'", errno);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return ok_status();
}

Result<std::string> UnixSocketClient::read_line(std::chrono::milliseconds timeout) {
  const std::string what = "read from unix socket '" + path_ + "'";
  if (fd_ < 0) return Error(ErrorCode::kIo, what + ": not connected");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t scanned = 0;
  while (true) {
    const size_t nl = buffer_.find('\n', scanned);
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    scanned = buffer_.size();
    if (buffer_.size() > kMaxBufferedLine)
      return Error(ErrorCode::kCorrupt, what + ": line too long");
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return Error(ErrorCode::kTimeout,
                   what + ": no line within " + std::to_string(timeout.count()) + "ms");
    pollfd p{fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno != EINTR) return Error::from_errno(what + ": poll", errno);
    if (ready <= 0) continue;
    char chunk[8192];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Error::from_errno(what, errno);
    }
    if (n == 0) return Error(ErrorCode::kIo, what + ": connection closed");
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

}  // namespace shardguard::io
