// Internal to io/secure_channel*.cc: the state behind a SecureChannel, one connection's state
// and the socket helpers. Includes Asio: never include this outside io/*.cc.
//
// Thread-safety: everything here lives on the loop thread.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "io/secure_channel.h"
#include "net/frame.h"
#include "net/handshake.h"
#include "net/log_limiter.h"
#include "policies/backoff.h"

namespace shardguard::io {
namespace detail {

enum class ConnPhase {
  kConnecting,  // outbound: resolving, connecting, or waiting to retry
  kHandshake,   // TCP is up, the handshake runs (bounded by handshake_timeout)
  kOpen,        // authenticated: frames flow
  kClosing,     // closed by this side, queued frames still being written
  kClosed,
};

struct SecureConn {
  SecureConn(ConnectionId id, boost::asio::io_context& ctx, bool outbound)
      : id(id), socket(ctx), timer(ctx), resolver(ctx), outbound(outbound), owed_close(outbound) {}

  ConnectionId id;
  boost::asio::ip::tcp::socket socket;
  boost::asio::steady_timer timer;  // connect, retry, handshake and linger deadlines
  uint64_t timer_generation = 0;    // tells a stale timer completion from the current one
  boost::asio::ip::tcp::resolver resolver;
  bool outbound;
  bool owed_close;  // on_closed is due: connect() returned the id, or on_connected ran
  ConnPhase phase = ConnPhase::kConnecting;
  std::string address;  // the peer as "host:port"
  std::string source;   // the peer's address without the port
  bool heard = false;   // inbound: the peer sent handshake bytes
  std::string peer_name;

  std::optional<net::ClientHandshake> client_handshake;
  std::optional<net::ServerHandshake> server_handshake;
  std::optional<net::FrameEncoder> encoder;
  std::optional<net::FrameDecoder> decoder;

  // Bumped whenever the socket is closed for a retry: completions of the old socket's reads,
  // writes and connects see a newer value and touch nothing.
  uint64_t socket_generation = 0;

  std::vector<char> read_buffer = std::vector<char>(64 * 1024);
  std::deque<std::string> out;  // references stay valid across push_back while a write runs
  size_t queued = 0;            // unsent bytes in `out`, including the write in flight
  bool writing = false;

  // Outbound only.
  std::string host;
  uint16_t port = 0;
  ConnectOptions connect_options;
  int attempt = 0;
  std::optional<policies::ExponentialBackoff> backoff;
  std::vector<boost::asio::ip::tcp::endpoint> endpoints;
};

// "1.2.3.4:80" or "[::1]:80".
std::string endpoint_text(const boost::asio::ip::tcp::endpoint& ep);

// TCP_NODELAY (small control messages go out at once), keepalive and TCP_USER_TIMEOUT from
// the options. Failures are ignored: they only make a dead peer take longer to notice.
void tune_socket(boost::asio::ip::tcp::socket& socket, const SecureChannelOptions& options);

}  // namespace detail

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using detail::ConnPhase;
using detail::SecureConn;
using ConnPtr = std::shared_ptr<SecureConn>;

// Causes of the rate-limited log; frame faults are kFrameBase + FrameFault.
enum SecureLogCause : int {
  kHandshakeRefused = 1,  // a peer that failed authentication or spoke another protocol
  kHandshakeIncomplete,   // timed out or hung up mid-handshake (scanners, overload)
  kOverCap,
  kQueueOverflow,
  kEvicted,
  kFrameBase = 100,
};

// Handlers hold a shared_ptr to the Impl, so it outlives the SecureChannel until the last
// completion has run; `dead` tells them the channel is gone.
struct SecureChannel::Impl : std::enable_shared_from_this<Impl> {
  using TimerFn = std::function<void(Impl&, const ConnPtr&)>;

  Impl(asio::io_context& ctx, SecureChannelOptions opts)
      : ctx(ctx), options(std::move(opts)), accept_retry(ctx), report_timer(ctx) {
    if (!options.uniform01) {
      auto rng = std::make_shared<std::mt19937_64>(std::random_device{}());
      options.uniform01 = [rng] { return std::uniform_real_distribution<double>(0, 1)(*rng); };
    }
  }

  asio::io_context& ctx;
  SecureChannelOptions options;
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;  // never erased: handlers refer to them
  asio::steady_timer accept_retry;
  std::map<ConnectionId, ConnPtr> conns;    // every live connection, any phase but closing
  std::map<ConnectionId, ConnPtr> closing;  // closed by this side, flushing
  ConnectionId next_id = 1;
  bool dead = false;
  SecureChannelStats stats;
  net::LogLimiter limiter;
  asio::steady_timer report_timer;
  bool report_armed = false;
  Status check_options() const;
  std::string describe(const SecureConn& c) const;

  // ---- logging, at most ~10 lines per second per cause ----

  void log_limited(int cause, const std::string& line);
  void arm_report();

  // ---- timers: one per connection, re-armed per phase ----

  void arm(const ConnPtr& c, Duration after, TimerFn fn);
  void disarm(const ConnPtr& c);

  // ---- closing ----

  void owe_close(const ConnPtr& c, const std::string& reason);
  // Closes at once (unsent bytes dropped); on_closed follows if it is owed.
  void close_now(const ConnPtr& c, const std::string& reason);
  void finish_close(const ConnPtr& c);
  void close_gracefully(const ConnPtr& c, const std::string& reason);

  // ---- accepting ----

  void accept(tcp::acceptor& acceptor);
  size_t unauthenticated() const;
  // Makes room for a connection from `source` when the handshake slots are full.
  void evict_unauthenticated(const std::string& source);
  void admit(tcp::socket socket);

  // ---- connecting (outbound) ----

  void try_connect(const ConnPtr& c);
  void connect_endpoints(const ConnPtr& c);
  // A failed try: retry after a jittered backoff while attempts remain, else give up.
  void connect_failed(const ConnPtr& c, const std::string& why);
  void start_client_handshake(const ConnPtr& c);

  // ---- the handshake ----

  void arm_handshake_deadline(const ConnPtr& c);
  void handshake_failed(const ConnPtr& c, const Error& error);
  void on_handshake_bytes(const ConnPtr& c, std::string_view data);
  void authenticated(const ConnPtr& c);

  // ---- frames ----

  void deliver(const ConnPtr& c);
  void read(const ConnPtr& c);
  void read_failed(const ConnPtr& c, const error_code& ec);
  void queue_raw(const ConnPtr& c, std::string bytes);
  Status queue_frame(const ConnPtr& c, std::string_view payload);
  void write(const ConnPtr& c);
  void shut_down(bool notify);
};

}  // namespace shardguard::io
