// Unix-domain stream socket server for newline-delimited messages (the job control
// protocol: JSON per line; parsing is the caller's job). The socket file is mode 0600 and
// every peer's uid is checked with SO_PEERCRED; a peer with another uid than the allowed one
// (or root, where allowed) is disconnected at once. Lines longer than the limit, and writers that let too much output queue up, get
// their connection closed (and logged), while other connections carry on.
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

#include "core/result.h"

namespace shardguard::io {

class EventLoop;

using ConnectionId = uint64_t;

struct UnixSocketServerOptions {
  std::string path;
  std::optional<uid_t> allowed_uid;    // nullopt: this process's uid (getuid())
  bool allow_root = false;             // also accept uid 0 (a root agent on the node)
  size_t max_line_bytes = 64 * 1024;   // without the '\n'
  size_t max_queued_bytes = 16 << 20;  // unsent output per connection
  std::function<void(ConnectionId)> on_connect;
  std::function<void(ConnectionId, std::string line)> on_line;  // without the '\n'
  std::function<void(ConnectionId)> on_disconnect;  // once per on_connect, whatever the cause
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
