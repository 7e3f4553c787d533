// A small HTTP/1.1 server on the EventLoop for the metrics and status endpoints: GET only,
// one handler per path, connection closed after each response. Binds to 127.0.0.1 by
// default (metrics are not for the whole network unless asked).
// Thread-safety: loop thread only; handlers run on the loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/result.h"

namespace shardguard::io {

class EventLoop;

struct HttpReply {
  int status = 200;
  std::string content_type = "text/plain; version=0.0.4";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpReply()>;

  HttpServer(EventLoop& loop, std::string bind_address, uint16_t port);
  ~HttpServer();

  // Serves `path` with `handler` (GET and HEAD); other paths get 404, other methods 405.
  void handle(const std::string& path, Handler handler);
  // Binds and starts accepting; port 0 picks a free port (see port()).
  Status start();
  void stop();
  uint16_t port() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace shardguard::io
