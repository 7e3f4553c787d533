// Unix-domain stream socket server for newline-delimited messages (the job control
// protocol: JSON per line; parsing is the caller's job). The socket file is mode 0600 and
// every peer's uid is checked with SO_PEERCRED; a peer with another uid than the allowed one
// (or root, where allowed) is disconnected at once, and the caller's on_accept policy may
// refuse others (it sees the peer's pid).
//
// Every resource a peer can make the server spend is bounded, so no client (or 1,000 of
// them) can grow its memory, file descriptors or log: a connection count (over it, new
// connections are closed at once), the line length, the output queued for a peer that does
// not read, and the lines per second a peer may send. A peer over a limit has its
// connection closed; each refusal and close is counted (stats()) and logged through a
// LogLimiter (10 lines/s per cause, then a count).
//
// Thread-safety: every method must be called on the loop thread (or before the loop
// runs); callbacks run on the loop thread. Use EventLoop::post() from other threads.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/result.h"

namespace shardguard::io {

class EventLoop;

using ConnectionId = uint64_t;

// The peer process as the kernel saw it at connect() (SO_PEERCRED): ids in this process's
// namespaces, so the pid of a rank in its own PID namespace is its host pid.
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  bool operator==(const PeerCredentials&) const = default;
};

struct UnixSocketServerOptions {
  std::string path;
  std::optional<uid_t> allowed_uid;   // nullopt: this process's uid (getuid())
  bool allow_root = false;            // also accept uid 0 (a root agent on the node)
  size_t max_line_bytes = 64 * 1024;  // without the '\n'
  size_t max_queued_bytes = 1 << 20;  // unsent output per connection; beyond: closed
  // Open connections at once; a connection beyond it is closed as soon as it is accepted.
  // 0: no limit. The default only keeps a forgetful caller off the fd limit; the supervisor
  // passes 2 x ranks + 8.
  size_t max_connections = 1024;
  // Lines a connection may send per second (a bucket of this many, refilled at this rate);
  // beyond: closed. 0: no limit.
  uint32_t max_lines_per_second = 1000;
  Clock* clock = nullptr;  // for the line rate and the log limiter; nullptr: RealClock
  // Called for each peer that passed the uid check, before on_connect; false refuses it
  // (closed, counted in refused_by_policy, no other callback).
  std::function<bool(ConnectionId, const PeerCredentials&)> on_accept;
  std::function<void(ConnectionId)> on_connect;
  std::function<void(ConnectionId, std::string line)> on_line;  // without the '\n'
  std::function<void(ConnectionId)> on_disconnect;  // once per on_connect, whatever the cause
};

// Counters since construction.
struct UnixSocketServerStats {
  uint64_t accepted = 0;              // connections admitted (on_connect called)
  uint64_t refused_uid = 0;           // another uid, or SO_PEERCRED failed
  uint64_t refused_by_policy = 0;     // on_accept returned false
  uint64_t refused_too_many = 0;      // max_connections were open
  uint64_t closed_line_too_long = 0;  // a line over max_line_bytes
  uint64_t closed_not_reading = 0;    // output over max_queued_bytes
  uint64_t closed_line_rate = 0;      // over max_lines_per_second
  uint64_t accept_errors = 0;         // accept() failed (EMFILE...): accepting paused 100 ms
};

class UnixSocketServer {
 public:
  UnixSocketServer(EventLoop& loop, UnixSocketServerOptions options);
  // Closes the listener and every connection (no callbacks) and removes the socket file.
  ~UnixSocketServer();
  UnixSocketServer(const UnixSocketServer&) = delete;
  UnixSocketServer& operator=(const UnixSocketServer&) = delete;

  // Binds and starts accepting. A stale socket file (nobody listening) is replaced; a live
  // one or a non-socket file at the path is an error naming the path.
  Status start();
  // Stops accepting and closes every connection (on_disconnect is called for each).
  void stop();

  // Queues `line` plus '\n' for one connection. kNotFound for an unknown or closed
  // connection, kInvalid if `line` contains '\n'.
  Status send(ConnectionId id, std::string_view line);
  // Queues `line` to every open connection; returns how many it was queued to.
  size_t broadcast(std::string_view line);
  // Closes one connection (on_disconnect follows).
  void close(ConnectionId id);

  size_t connection_count() const;
  const std::string& path() const;
  // The credentials of an open connection's peer; nullopt for an unknown or closed one.
  std::optional<PeerCredentials> peer(ConnectionId id) const;
  UnixSocketServerStats stats() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// Blocking client for the same protocol, plain POSIX: used by tests and by the job side.
// Thread-safety: one thread at a time.
class UnixSocketClient {
 public:
  // Connects to `path`; kNotFound if nothing is there, kIo otherwise.
  static Result<UnixSocketClient> connect(const std::string& path);
  UnixSocketClient(UnixSocketClient&& other) noexcept;
  UnixSocketClient& operator=(UnixSocketClient&& other) noexcept;
  ~UnixSocketClient();

  // Writes `line` plus '\n' completely (blocking). kInvalid if `line` contains '\n'.
  Status send_line(std::string_view line);
  // Writes raw bytes, for tests that need partial lines.
  Status send_raw(std::string_view bytes);
  // Returns the next line without its '\n'. kTimeout if none arrives in time; kIo
  // ("connection closed") when the server has closed the connection.
  Result<std::string> read_line(std::chrono::milliseconds timeout);
  void close();
  int fd() const { return fd_; }

 private:
  explicit UnixSocketClient(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
  std::string buffer_;
};

}  // namespace shardguard::io
