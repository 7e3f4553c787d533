// A small HTTP/1.1 server on the EventLoop for the metrics and status endpoints: GET only,
// one handler per path, connection closed after each response. Binds to 127.0.0.1 by
// default (metrics are not for the whole network unless asked).
//
// Any local user can reach the port, so what a client can make it spend is bounded: at most
// max_connections open at once (when full, the oldest connection that has not finished
// sending its request is closed to make room; if every one is being answered, accepting
// pauses until one ends), max_connection_time per connection from accept to the last byte
// written, a small request size, and after EMFILE/ENFILE (or ENOBUFS/ENOMEM) from accept a
// pause with doubling backoff instead of a busy retry. Warnings go through a LogLimiter.
//
// Thread-safety: loop thread only; handlers run on the loop thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/clock.h"
#include "core/result.h"

namespace shardguard::io {

class EventLoop;

struct HttpReply {
  int status = 200;
  std::string content_type = "text/plain; version=0.0.4";
  std::string body;
};

struct HttpServerOptions {
  size_t max_connections = 32;
  Duration max_connection_time = std::chrono::seconds(5);            // a slow client is closed
  size_t max_request_bytes = 16 * 1024;                              // header and body together
  Duration accept_backoff_initial = std::chrono::milliseconds(100);  // after EMFILE & co
  Duration accept_backoff_max = std::chrono::seconds(2);
  Clock* clock = nullptr;  // for the log limiter; nullptr: RealClock
};

// Counters since construction, and the connections open now.
struct HttpServerStats {
  uint64_t accepted = 0;
  uint64_t served = 0;           // responses written completely
  uint64_t timed_out = 0;        // closed at max_connection_time
  uint64_t evicted = 0;          // closed unanswered to make room for a new connection
  uint64_t accept_errors = 0;    // accept() failed
  uint64_t accept_backoffs = 0;  // pauses after EMFILE/ENFILE/ENOBUFS/ENOMEM
  size_t open = 0;
};

class HttpServer {
 public:
  using Handler = std::function<HttpReply()>;

  HttpServer(EventLoop& loop, std::string bind_address, uint16_t port,
             HttpServerOptions options = {});
  ~HttpServer();

  // Serves `path` with `handler` (GET and HEAD); other paths get 404, other methods 405.
  void handle(const std::string& path, Handler handler);
  // Binds and starts accepting; port 0 picks a free port (see port()).
  Status start();
  // Stops accepting and closes every open connection.
  void stop();
  uint16_t port() const;
  HttpServerStats stats() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace shardguard::io
