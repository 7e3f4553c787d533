#include "io/unix_socket_server.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>

#include "core/log_limiter.h"
#include "io/detail/asio.h"
#include "io/detail/fd.h"
#include "io/detail/unix_address.h"
#include "io/event_loop.h"

namespace shardguard::io {

namespace asio = boost::asio;
using stream = asio::local::stream_protocol;

namespace {

struct Connection {
  Connection(ConnectionId id, stream::socket socket, PeerCredentials peer)
      : id(id), socket(std::move(socket)), peer(peer) {}
  ConnectionId id;
  stream::socket socket;
  PeerCredentials peer;
  double line_tokens = 0;  // the line-rate bucket
  SteadyTime tokens_at{};
  std::array<char, 8192> read_buffer;
  std::string partial;  // bytes of a line whose '\n' has not arrived yet
  std::deque<std::string> out;
  size_t queued_bytes = 0;
  bool writing = false;
  bool closed = false;
};

// Whether a server is accepting on `path`: a refused connect means a stale socket file.
bool someone_listens(const std::string& path) {
  detail::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  auto address = detail::unix_address(path);
  if (!fd || !address.ok()) return false;
  return ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address->addr), address->length) ==
         0;
}

}  // namespace

struct UnixSocketServer::Impl : std::enable_shared_from_this<Impl> {
  Impl(EventLoop& loop, UnixSocketServerOptions opts)
      : ctx(detail::asio_context(loop)),
        options(std::move(opts)),
        clock(options.clock != nullptr ? *options.clock : RealClock::instance()),
        timers(loop),
        limiter(clock, {}, nullptr, &timers),
        acceptor(ctx),
        retry_timer(ctx) {
    if (!options.allowed_uid) options.allowed_uid = ::getuid();
  }

  asio::io_context& ctx;
  UnixSocketServerOptions options;
  Clock& clock;
  AsioTimerFactory timers;
  LogLimiter limiter;  // per-cause warnings: a flood of bad peers is a count, not a log
  UnixSocketServerStats stats;
  stream::acceptor acceptor;
  asio::steady_timer retry_timer;  // re-accept after running out of file descriptors
  std::map<ConnectionId, std::shared_ptr<Connection>> connections;
  ConnectionId next_id = 1;
  bool dead = false;      // the server object is gone: no more callbacks
  ino_t bound_inode = 0;  // the socket file we created, so we only ever remove our own
  dev_t bound_dev = 0;

  void accept() {
    acceptor.async_accept(
        [self = shared_from_this()](const boost::system::error_code& ec, stream::socket socket) {
          if (self->dead || !self->acceptor.is_open()) return;
          if (ec) {
            if (ec == asio::error::operation_aborted) return;
            ++self->stats.accept_errors;
            self->limiter.warn("unix socket accept error", "unix socket '" + self->options.path +
                                                               "': accept: " + ec.message() +
                                                               "; pausing 100ms");
            self->retry_timer.expires_after(std::chrono::milliseconds(100));
            self->retry_timer.async_wait([self](const boost::system::error_code& ec) {
              if (!ec && !self->dead && self->acceptor.is_open()) self->accept();
            });
            return;
          }
          self->admit(std::move(socket));
          self->accept();
        });
  }

  // Every refusal closes the socket as it goes out of scope.
  void admit(stream::socket socket) {
    const std::string where = "unix socket '" + options.path + "'";
    if (options.max_connections > 0 && connections.size() >= options.max_connections) {
      ++stats.refused_too_many;
      limiter.warn("unix socket too many connections",
                   where + ": " + std::to_string(connections.size()) +
                       " connections open (the limit); refused a new one");
      return;
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      ++stats.refused_uid;
      limiter.warn("unix socket peercred", where + ": SO_PEERCRED: " + std::strerror(errno));
      return;
    }
    if (cred.uid != *options.allowed_uid && !(options.allow_root && cred.uid == 0)) {
      ++stats.refused_uid;
      limiter.warn("unix socket wrong uid", where + ": rejected peer pid " +
                                                std::to_string(cred.pid) + " uid " +
                                                std::to_string(cred.uid) + " (allowed uid " +
                                                std::to_string(*options.allowed_uid) + ")");
      return;
    }
    const PeerCredentials peer{cred.pid, cred.uid, cred.gid};
    const ConnectionId id = next_id++;
    if (options.on_accept && !options.on_accept(id, peer)) {
      ++stats.refused_by_policy;
      limiter.warn("unix socket refused by policy",
                   where + ": refused peer pid " + std::to_string(peer.pid));
      return;
    }
    if (dead || !acceptor.is_open()) return;  // on_accept stopped the server
    auto conn = std::make_shared<Connection>(id, std::move(socket), peer);
    conn->line_tokens = options.max_lines_per_second;
    conn->tokens_at = clock.now();
    connections.emplace(conn->id, conn);
    ++stats.accepted;
    if (options.on_connect) options.on_connect(conn->id);
    if (!conn->closed) read(conn);
  }

  // Takes one line from the connection's bucket; false when it is empty (over the rate).
  bool take_line_token(Connection& conn) {
    const double rate = options.max_lines_per_second;
    if (rate <= 0) return true;
    const SteadyTime now = clock.now();
    const double elapsed = std::chrono::duration<double>(now - conn.tokens_at).count();
    conn.tokens_at = now;
    conn.line_tokens = std::min(rate, conn.line_tokens + elapsed * rate);
    if (conn.line_tokens < 1) return false;
    conn.line_tokens -= 1;
    return true;
  }

  void read(const std::shared_ptr<Connection>& conn) {
    conn->socket.async_read_some(
        asio::buffer(conn->read_buffer),
        [self = shared_from_this(), conn](const boost::system::error_code& ec, size_t n) {
          if (self->dead || conn->closed) return;
          if (ec) {
            if (!conn->partial.empty()) {
              spdlog::debug("unix socket '{}': connection {} ended mid-line ({} bytes dropped)",
                            self->options.path, conn->id, conn->partial.size());
            }
            return self->close_connection(conn);
          }
          if (self->consume(conn, std::string_view(conn->read_buffer.data(), n))) self->read(conn);
        });
  }

  // Splits `data` into lines; returns false once the connection has been closed.
  bool consume(const std::shared_ptr<Connection>& conn, std::string_view data) {
    while (!data.empty()) {
      const size_t nl = data.find('\n');
      const std::string_view piece = data.substr(0, nl);
      if (conn->partial.size() + piece.size() > options.max_line_bytes) {
        ++stats.closed_line_too_long;
        limiter.warn("unix socket line too long",
                     "unix socket '" + options.path + "': connection " + std::to_string(conn->id) +
                         " (pid " + std::to_string(conn->peer.pid) + ") sent a line longer than " +
                         std::to_string(options.max_line_bytes) + " bytes; closing");
        close_connection(conn);
        return false;
      }
      conn->partial.append(piece);
      if (nl == std::string_view::npos) break;
      data.remove_prefix(nl + 1);
      if (!take_line_token(*conn)) {
        ++stats.closed_line_rate;
        limiter.warn("unix socket line rate",
                     "unix socket '" + options.path + "': connection " + std::to_string(conn->id) +
                         " (pid " + std::to_string(conn->peer.pid) + ") sent more than " +
                         std::to_string(options.max_lines_per_second) + " lines/s; closing");
        close_connection(conn);
        return false;
      }
      std::string line = std::move(conn->partial);
      conn->partial.clear();
      if (options.on_line) options.on_line(conn->id, std::move(line));
      if (dead || conn->closed) return false;
    }
    return true;
  }

  void write(const std::shared_ptr<Connection>& conn) {
    conn->writing = true;
    asio::async_write(
        conn->socket, asio::buffer(conn->out.front()),
        [self = shared_from_this(), conn](const boost::system::error_code& ec, size_t) {
          conn->writing = false;
          if (self->dead || conn->closed) return;
          if (ec) return self->close_connection(conn);
          conn->queued_bytes -= conn->out.front().size();
          conn->out.pop_front();
          if (!conn->out.empty()) self->write(conn);
        });
  }

  Status queue(const std::shared_ptr<Connection>& conn, std::string_view line) {
    if (conn->queued_bytes + line.size() + 1 > options.max_queued_bytes) {
      ++stats.closed_not_reading;
      limiter.warn("unix socket not reading",
                   "unix socket '" + options.path + "': connection " + std::to_string(conn->id) +
                       " (pid " + std::to_string(conn->peer.pid) + ") has " +
                       std::to_string(conn->queued_bytes) + " bytes unsent; closing");
      close_connection(conn);
      return Error(ErrorCode::kIo, "unix socket '" + options.path + "': connection " +
                                       std::to_string(conn->id) + " is not reading; closed");
    }
    std::string message;
    message.reserve(line.size() + 1);
    message.append(line).push_back('\n');
    conn->queued_bytes += message.size();
    conn->out.push_back(std::move(message));
    if (!conn->writing) write(conn);
    return ok_status();
  }

  void close_connection(std::shared_ptr<Connection> conn,
                        bool notify = true) {  // by value: erased below
    if (conn->closed) return;
    conn->closed = true;
    boost::system::error_code ignored;
    conn->socket.close(ignored);
    connections.erase(conn->id);
    if (notify && !dead && options.on_disconnect) options.on_disconnect(conn->id);
  }

  void remove_socket_file() {
    struct stat st {};
    if (bound_inode != 0 && ::lstat(options.path.c_str(), &st) == 0 && st.st_ino == bound_inode &&
        st.st_dev == bound_dev) {
      ::unlink(options.path.c_str());
    }
    bound_inode = 0;
  }

  void shut_down(bool notify) {
    boost::system::error_code ignored;
    acceptor.close(ignored);
    retry_timer.cancel();
    while (!connections.empty()) close_connection(connections.begin()->second, notify);
    remove_socket_file();
  }
};

UnixSocketServer::UnixSocketServer(EventLoop& loop, UnixSocketServerOptions options)
    : impl_(std::make_shared<Impl>(loop, std::move(options))) {}

UnixSocketServer::~UnixSocketServer() {
  impl_->dead = true;
  impl_->shut_down(/*notify=*/false);
}

Status UnixSocketServer::start() {
  Impl& s = *impl_;
  const std::string& path = s.options.path;
  const std::string what = "unix socket '" + path + "'";
  if (s.acceptor.is_open()) return Error(ErrorCode::kInternal, what + ": already started");
  // A path longer than sun_path is bound through its directory (io/detail/unix_address.h).
  auto address = detail::unix_address(path);
  if (!address.ok()) return std::move(address).error();
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Error(ErrorCode::kInvalid, what + ": exists and is not a socket");
    }
    if (someone_listens(path)) {
      return Error(ErrorCode::kIo, what + ": another server is listening there", EADDRINUSE);
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Error::from_errno(what + ": remove stale socket", errno);
    }
  }
  boost::system::error_code ec;
  s.acceptor.open(stream(), ec);
  if (!ec) s.acceptor.bind(stream::endpoint(address->in_use), ec);
  if (ec) {
    boost::system::error_code ignored;
    s.acceptor.close(ignored);
    return Error(ErrorCode::kIo, what + ": bind: " + ec.message(), ec.value());
  }
  if (::lstat(path.c_str(), &st) == 0) {
    s.bound_inode = st.st_ino;
    s.bound_dev = st.st_dev;
  }
  // Peer uids are checked too, so the short window before chmod cannot be abused.
  if (::chmod(path.c_str(), 0600) != 0) {
    const int err = errno;
    s.shut_down(false);
    return Error::from_errno(what + ": chmod 0600", err);
  }
  s.acceptor.listen(4096, ec);  // the kernel caps it at net.core.somaxconn
  if (ec) {
    s.shut_down(false);
    return Error(ErrorCode::kIo, what + ": listen: " + ec.message(), ec.value());
  }
  s.accept();
  return ok_status();
}

void UnixSocketServer::stop() { impl_->shut_down(/*notify=*/true); }

Status UnixSocketServer::send(ConnectionId id, std::string_view line) {
  if (line.find('\n') != std::string_view::npos) {
    return Error(ErrorCode::kInvalid, "unix socket send: line contains a newline");
  }
  auto it = impl_->connections.find(id);
  if (it == impl_->connections.end()) {
    return Error(ErrorCode::kNotFound,
                 "unix socket '" + impl_->options.path + "': no connection " + std::to_string(id));
  }
  return impl_->queue(it->second, line);
}

size_t UnixSocketServer::broadcast(std::string_view line) {
  if (line.find('\n') != std::string_view::npos) return 0;
  std::vector<std::shared_ptr<Connection>> targets;
  targets.reserve(impl_->connections.size());
  for (const auto& [id, conn] : impl_->connections) targets.push_back(conn);
  size_t sent = 0;
  for (const auto& conn : targets) {
    if (!conn->closed && impl_->queue(conn, line).ok()) ++sent;
  }
  return sent;
}

void UnixSocketServer::close(ConnectionId id) {
  auto it = impl_->connections.find(id);
  if (it != impl_->connections.end()) impl_->close_connection(it->second);
}

size_t UnixSocketServer::connection_count() const { return impl_->connections.size(); }

const std::string& UnixSocketServer::path() const { return impl_->options.path; }

std::optional<PeerCredentials> UnixSocketServer::peer(ConnectionId id) const {
  auto it = impl_->connections.find(id);
  if (it == impl_->connections.end()) return std::nullopt;
  return it->second->peer;
}

UnixSocketServerStats UnixSocketServer::stats() const { return impl_->stats; }

}  // namespace shardguard::io
