// A TCP proxy that sits in a node's connection to the coordinator, as an attacker on the path
// would: it forwards both ways, parses what the node sends (the two handshake messages, then
// frames: [u32 length][u64 sequence][payload][32-byte MAC], net/frame.h) and records every
// unit whole, and can inject bytes into the node->coordinator stream between two units (a
// captured frame replayed). It accepts any number of connections in turn (a node reconnects).
//
// Thread-safety: one pump thread inside; the public methods may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace shardguard::testing::multinode {

class SessionProxy {
 public:
  // Listens on 127.0.0.1 (a port of the kernel's choosing) and forwards to 127.0.0.1:upstream.
  explicit SessionProxy(uint16_t upstream);
  ~SessionProxy();
  SessionProxy(const SessionProxy&) = delete;
  SessionProxy& operator=(const SessionProxy&) = delete;

  uint16_t port() const { return port_; }
  // Connections accepted so far.
  size_t connections();
  // Everything the node sent on connection `conn` (0-based), and its frames (after the
  // handshake), each whole as on the wire.
  std::string raw(size_t conn);
  std::vector<std::string> frames(size_t conn);
  // Writes `bytes` to the coordinator on connection `conn` between two of the node's units;
  // false if the connection is closed or `timeout` passes first.
  bool inject(size_t conn, const std::string& bytes, std::chrono::milliseconds timeout);

 private:
  struct Conn {
    int client = -1, server = -1;
    std::string pending;  // the node's bytes not yet forwarded: an incomplete unit
    int handshake_messages = 0;
    std::string raw;
    std::vector<std::string> frames;
    std::string inject;
    bool closed = false;
  };
  void pump();
  void from_client(Conn& c, const char* data, size_t n);
  void close(Conn& c);

  uint16_t upstream_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<Conn> conns_;
  std::thread thread_;
};

}  // namespace shardguard::testing::multinode
