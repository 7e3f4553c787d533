// SecureChannel against hostile bytes on loopback: garbage, a recorded session replayed on a
// new connection, frames of one connection sent on another, replayed, tampered and oversize
// frames, a silent peer, and a flood of bad connections (rate-limited logging).
#include <catch2/catch.hpp>

#include "io/secure_channel.h"
#include "tests/io/secure_fixture.h"

using namespace shardguard;
using namespace shardguard::testing;

namespace {

// A TCP proxy for one connection that records what the client sent, as an eavesdropper on
// the network would.
class RecordingProxy {
 public:
  explicit RecordingProxy(uint16_t upstream) : upstream_(upstream) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listen_fd_, 1) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { pump(); });
  }
  ~RecordingProxy() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
  }
  uint16_t port() const { return port_; }
  std::string recorded() {
    std::lock_guard lock(mu_);
    return from_client_;
  }

 private:
  void pump() {
    pollfd lp{listen_fd_, POLLIN, 0};
    while (!stop_ && ::poll(&lp, 1, 20) <= 0) {
    }
    if (stop_) return;
    const int client = ::accept(listen_fd_, nullptr, nullptr);
    RawPeer server(upstream_);
    pollfd fds[2] = {{client, POLLIN, 0}, {server.fd(), POLLIN, 0}};
    char buf[65536];
    while (!stop_) {
      if (::poll(fds, 2, 20) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const ssize_t n = ::recv(fds[i].fd, buf, sizeof buf, 0);
        if (n <= 0) {
          ::close(client);
          return;
        }
        if (i == 0) {
          std::lock_guard lock(mu_);
          from_client_.append(buf, static_cast<size_t>(n));
        }
        ::send(fds[1 - i].fd, buf, static_cast<size_t>(n), MSG_NOSIGNAL);
      }
    }
    ::close(client);
  }

  uint16_t upstream_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::string from_client_;
};

}  // namespace

TEST_CASE("Garbage instead of a handshake is refused and logged") {
  LogCapture log;
  Host server("coordinator", secret_of('k'));
  const uint16_t port = server.listen();
  const std::string garbage = GENERATE(as<std::string>{}, "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                                       std::string("\0\0", 2), std::string("\0\x05hello", 7));
  RawPeer peer(port);
  peer.send_all(garbage);
  CHECK(peer.closed_by_server(3000ms));
  CHECK(server.connected().empty());
  CHECK(server.stats().handshake_failures == 1);
  CHECK(log.count("handshake failed") == 1);
}

TEST_CASE("A recorded session replayed on a new connection is refused; nothing is delivered") {
  LogCapture log;
  auto secret = secret_of('k');
  Host server("coordinator", secret);
  const uint16_t port = server.listen();
  std::string recording;
  {
    RecordingProxy proxy(port);
    Host client("node-1", secret);
    const ConnectionId id = client.connect(proxy.port());
    REQUIRE(client.wait_connected());
    REQUIRE(server.wait_connected());
    REQUIRE(client.send(id, "checkpoint_now step=100").ok());
    REQUIRE(client.send(id, "stop").ok());
    REQUIRE(server.wait_messages(server.first_connected(), 2));
    recording = proxy.recorded();
  }
  REQUIRE(recording.size() > 100);
  const size_t delivered = server.total_messages();
  CHECK(delivered == 2);

  SECTION("the whole byte stream, handshake included") {
    RawPeer replay(port);
    replay.send_all(recording);
    CHECK(replay.closed_by_server(3000ms));
    CHECK(log.count("does not verify") >= 1);
  }
  SECTION("its frames, after a fresh handshake of our own") {
    RawPeer replay(port);
    replay.handshake(secret, "node-1");
    // The frames are what follows the client's hello and response.
    const size_t handshake_bytes = net::encode_hello(net::Hello{1, {}, "node-1"}).size() +
                                   net::encode_response(net::Response{}).size();
    replay.send_all(recording.substr(handshake_bytes));
    CHECK(replay.closed_by_server(3000ms));
    CHECK(log.count("MAC does not verify") == 1);
    CHECK(server.stats().rejected_frames == 1);
  }
  CHECK(server.total_messages() == delivered);
}

TEST_CASE("Replayed, tampered and oversize frames close the connection; nothing is delivered") {
  LogCapture log;
  auto secret = secret_of('k');
  Host server("coordinator", secret);
  const uint16_t port = server.listen();
  RawPeer peer(port);
  const net::Session session = peer.handshake(secret, "node-1");
  REQUIRE(server.wait_connected());
  const ConnectionId id = server.first_connected();
  auto encoder = net::FrameEncoder::create(session.send);
  REQUIRE(encoder.ok());
  const std::string f0 = *encoder->encode("first");

  SECTION("replay within the connection") {
    peer.send_all(f0 + f0);
    CHECK(peer.closed_by_server(3000ms));
    CHECK(server.messages(id) == std::vector<std::string>{"first"});
    CHECK(log.count("replayed frame") == 1);
    REQUIRE(server.wait_closed(id));
    CHECK_THAT(server.closed_reason(id),
               Catch::Contains("rejected frame") && Catch::Contains("replayed"));
  }
  SECTION("a flipped bit in the payload") {
    std::string bad = f0;
    bad[net::kFrameHeaderBytes + 2] ^= 0x01;
    peer.send_all(bad);
    CHECK(peer.closed_by_server(3000ms));
    CHECK(server.messages(id).empty());
    CHECK(log.count("MAC does not verify") == 1);
  }
  SECTION("a length over the limit, refused from the header alone") {
    peer.send_all(std::string("\x00\x20\x00\x00\0\0\0\0\0\0\0\0", 12));  // 2 MiB
    CHECK(peer.closed_by_server(3000ms));
    CHECK(log.count("more than the 1048576 allowed") == 1);
  }
  SECTION("a frame skipped") {
    (void)*encoder->encode("lost");
    peer.send_all(*encoder->encode("third"));
    CHECK(peer.closed_by_server(3000ms));
    CHECK(log.count("out of order (sequence 2, expected 0)") == 1);
  }
  CHECK(server.stats().rejected_frames == 1);
}

TEST_CASE("A peer that never finishes the handshake is cut off at the timeout") {
  LogCapture log;
  Host server("coordinator", secret_of('k'),
              [](io::SecureChannelOptions& o) { o.handshake_timeout = 200ms; });
  const uint16_t port = server.listen();
  RawPeer silent(port);
  const auto start = SteadyClock::now();
  REQUIRE(silent.closed_by_server(3000ms));
  const auto took = SteadyClock::now() - start;
  CHECK(took >= 150ms);
  CHECK(took < 2000ms);
  CHECK(log.count("handshake not finished within 200ms") == 1);
}

TEST_CASE("A flood of bad connections logs at most ~10 lines a second, then a count") {
  LogCapture log;
  Host server("coordinator", secret_of('k'));
  const uint16_t port = server.listen();
  constexpr int kFlood = 40;
  for (int i = 0; i < kFlood; ++i) {
    RawPeer peer(port);
    peer.send_all("GET / HTTP/1.1\r\n\r\n");
    CHECK(peer.closed_by_server(3000ms));
  }
  REQUIRE(eventually([&] { return server.stats().handshake_failures == kFlood; }, 5000ms));
  const size_t lines = log.count("handshake failed");
  CHECK(lines >= 10);
  CHECK(lines < kFlood);
  // The suppressed count comes once the window ends.
  REQUIRE(eventually([&] { return log.count("more refused handshakes not logged") >= 1; }, 3000ms));
  size_t reported = 0;
  for (const auto& line : log.lines()) {
    const auto at = line.find(" more refused handshakes not logged");
    if (at == std::string::npos) continue;
    const auto start = line.rfind(' ', at - 1) + 1;
    reported += std::stoul(line.substr(start, at - start));
  }
  CHECK(lines + reported == kFlood);
}
