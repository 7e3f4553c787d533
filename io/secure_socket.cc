// Socket helpers for SecureChannel (io/detail/secure_channel_impl.h).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>

#include "io/detail/secure_channel_impl.h"

namespace shardguard::io::detail {

std::string endpoint_text(const boost::asio::ip::tcp::endpoint& ep) {
  const auto addr = ep.address();
  const std::string host = addr.is_v6() ? "[" + addr.to_string() + "]" : addr.to_string();
  return host + ":" + std::to_string(ep.port());
}

void tune_socket(boost::asio::ip::tcp::socket& socket, const SecureChannelOptions& options) {
  using std::chrono::duration_cast;
  boost::system::error_code ignored;
  socket.set_option(boost::asio::ip::tcp::no_delay(true), ignored);
  socket.set_option(boost::asio::socket_base::keep_alive(true), ignored);
  const int fd = socket.native_handle();
  auto whole_seconds = [](Duration d) {
    return std::max<int>(1, static_cast<int>(duration_cast<std::chrono::seconds>(d).count()));
  };
  const int idle = whole_seconds(options.keepalive_idle);
  const int interval = whole_seconds(options.keepalive_interval);
  const int count = std::max(1, options.keepalive_count);
  const auto user_timeout =
      static_cast<unsigned>(duration_cast<std::chrono::milliseconds>(options.user_timeout).count());
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  // Unacknowledged data older than this kills the connection, even while keepalive is quiet.
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
}

}  // namespace shardguard::io::detail
