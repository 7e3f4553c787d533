// SecureChannel: authenticated TCP connections between the coordinator and the node
// supervisors of a multi-node job (DESIGN.md 6b). One object can listen (the coordinator) and
// connect (a node), or both; either way every connection first runs the shared-secret
// handshake of net/handshake.h, bounded by a timeout, and then carries only frames that pass
// net/frame.h's MAC and sequence checks. A connection whose peer fails the handshake or sends
// one tampered, replayed, reordered or oversize frame is closed; the cause is logged, at most
// about 10 lines per second per cause, then as a count. Payloads are handed to on_message as
// bytes and never interpreted here. They are authenticated, not encrypted.
//
// A peer process that dies (SIGKILL included) is seen at once: its kernel closes the socket
// and on_closed follows. TCP keepalive and TCP_USER_TIMEOUT bound the time to notice a peer
// whose machine vanished without a word; the protocol's heartbeats remain the primary signal.
//
// Thread-safety: every method must be called on the loop thread (or before the loop runs);
// every callback runs on the loop thread, never inside a call to this object's methods.
// Destroy the channel before its EventLoop, and never from inside one of its callbacks.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/result.h"
#include "net/frame.h"
#include "net/secret.h"

namespace shardguard::io {

class EventLoop;

using ConnectionId = uint64_t;

struct SecureChannelOptions {
  std::shared_ptr<const net::Secret> secret;  // required; shared by every connection
  std::string name;  // this side's name in handshakes: 1-255 printable ASCII, no spaces
  Duration handshake_timeout = std::chrono::seconds(5);
  size_t max_payload = net::kDefaultMaxPayload;  // per frame, both ways
  // Unsent bytes per connection; a peer that lets more pile up is dropped. One frame larger
  // than this is still accepted into an empty queue.
  size_t max_queued_bytes = size_t{1} << 20;
  size_t max_connections = 1024;    // every connection, both directions, in any phase
  // Accepted connections still in the handshake, in all and from one source address. A new
  // one beyond either takes the slot of the oldest (first one that sent nothing yet), so a
  // party without the secret opening connections as fast as it can delays a real node's
  // handshake by no more than its own round trip (first come, first served kept a restarted
  // node out for the 25 s of its window).
  size_t max_unauthenticated = 64;
  size_t max_unauthenticated_per_source = 16;
  // TCP keepalive and TCP_USER_TIMEOUT: how long a silent or unreachable peer can go unseen.
  Duration keepalive_idle = std::chrono::seconds(2);
  Duration keepalive_interval = std::chrono::seconds(1);
  int keepalive_count = 3;
  Duration user_timeout = std::chrono::seconds(5);
  // Jitter for connect retries: doubles in [0, 1]. Empty: a PRNG seeded from random_device.
  std::function<double()> uniform01;

  // After a successful handshake; `peer_name` is the name the peer proved it holds the
  // secret under (authenticated, but any holder of the secret can choose any name). The
  // connecting side learns first: it runs once the server has proven itself, one message
  // before the server has checked the client (a refusal then arrives as on_closed).
  std::function<void(ConnectionId, const std::string& peer_name)> on_connected;
  std::function<void(ConnectionId, std::string payload)> on_message;
  // Exactly once per id returned by connect() or seen in on_connected (accepted connections
  // that never authenticate are dropped silently, apart from the log). `reason` says why.
  std::function<void(ConnectionId, const std::string& reason)> on_closed;
};

struct ConnectOptions {
  Duration connect_timeout = std::chrono::seconds(2);  // per attempt: resolve and connect
  int attempts = 5;  // tries before giving up; a handshake refusal is never retried
  Duration backoff_initial = std::chrono::milliseconds(100);
  Duration backoff_max = std::chrono::seconds(2);
};

struct SecureChannelStats {
  uint64_t accepted = 0;            // inbound TCP connections taken in
  uint64_t authenticated = 0;       // handshakes completed, both directions
  uint64_t handshake_failures = 0;  // refused, malformed, timed out or cut short
  uint64_t rejected_frames = 0;     // bad MAC, replayed, reordered, oversize
  uint64_t refused_over_cap = 0;    // connections refused by max_connections
  uint64_t evicted_unauthenticated = 0;  // handshakes closed for a newer connection
  uint64_t queue_overflows = 0;     // connections dropped for not reading
  uint64_t messages_received = 0;
};

class SecureChannel {
 public:
  // kInvalid errors in the options (no secret, bad name) surface from listen()/connect().
  SecureChannel(EventLoop& loop, SecureChannelOptions options);
  // Closes every socket at once; no callbacks run after this.
  ~SecureChannel();
  SecureChannel(const SecureChannel&) = delete;
  SecureChannel& operator=(const SecureChannel&) = delete;

  // Listens on `address` (an IPv4 or IPv6 literal; "::" takes both) and `port` (0: the kernel
  // picks one). Returns the bound port. Can be called again for more addresses.
  Result<uint16_t> listen(const std::string& address, uint16_t port);

  // Starts connecting to host:port (a name is resolved) and returns the connection's id at
  // once: on_connected follows when the server is authenticated, or on_closed with the reason
  // after options.attempts failed tries (refused, timed out), or at once on a handshake refusal
  // (wrong secret). kInvalid for bad channel options.
  Result<ConnectionId> connect(const std::string& host, uint16_t port, ConnectOptions options = {});

  // Queues `payload` as the connection's next frame. kNotFound for an unknown or closed id,
  // kInvalid before on_connected or for a payload over max_payload, kIo when the queue limit
  // is passed (the connection is then closed and on_closed follows).
  Status send(ConnectionId id, std::string_view payload);

  // Closes the connection: frames already queued are still written (for up to 1 s), nothing
  // more is delivered; on_closed(id, "closed by this side") follows. Unknown ids are ignored.
  void close(ConnectionId id);

  // Stops listening and closes every connection (on_closed follows for each).
  void stop();

  // Connections in any phase (connecting, handshake, open).
  size_t connection_count() const;
  // "host:port" of the peer as seen on the socket, or nullopt for an unknown id.
  std::optional<std::string> peer_address(ConnectionId id) const;
  SecureChannelStats stats() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace shardguard::io
