// sg_bench_net: the authenticated network plane on loopback, against plain TCP in the same run.
//   handshake: SecureChannel connect -> on_connected (TCP connect + challenge-response + HKDF)
//              vs a plain TCP connect + accept;
//   throughput: MB/s of payload through SecureChannel frames (HMAC-SHA256 each way, a window of
//              acknowledgements so the bounded queue never overflows) vs the same bytes in the
//              same chunk sizes through a plain blocking socket pair.
// Usage: sg_bench_net [--bytes 256MiB] [--frame 64KiB] [--handshakes 200]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/units.h"
#include "io/event_loop.h"
#include "io/secure_channel.h"
#include "net/crypto.h"
#include "net/secret.h"

using namespace shardguard;
using SteadyClock = std::chrono::steady_clock;

namespace {

double seconds_since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// An EventLoop running on its own thread until destroyed.
class LoopThread {
 public:
  LoopThread()
      : thread_([this] {
          while (!stop_)
            loop.run_until([this] { return stop_.load(); }, std::chrono::milliseconds(50));
        }) {}
  ~LoopThread() {
    stop_ = true;
    loop.stop();
    thread_.join();
  }
  template <typename Fn>
  void sync(Fn fn) {
    std::atomic<bool> done{false};
    loop.post([&] {
      fn();
      done = true;
      done.notify_all();
    });
    done.wait(false);  // sleeps: a spinning driver would steal a core from the loops
  }
  io::EventLoop loop;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

int plain_listener(uint16_t* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 128) != 0) {
    std::perror("plain listener");
    std::exit(1);
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

int plain_connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    std::perror("plain connect");
    std::exit(1);
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// Median seconds of a plain connect + accept.
std::vector<double> plain_handshakes(int n) {
  uint16_t port = 0;
  const int lfd = plain_listener(&port);
  std::vector<double> out;
  for (int i = 0; i < n; ++i) {
    const auto t = SteadyClock::now();
    const int c = plain_connect(port);
    const int s = ::accept(lfd, nullptr, nullptr);
    out.push_back(seconds_since(t));
    ::close(c);
    ::close(s);
  }
  ::close(lfd);
  return out;
}

// MB/s of `total` bytes in `frame`-sized writes through a plain socket pair.
double plain_throughput(size_t total, size_t frame) {
  uint16_t port = 0;
  const int lfd = plain_listener(&port);
  const int c = plain_connect(port);
  const int s = ::accept(lfd, nullptr, nullptr);
  const std::string chunk(frame, 'p');
  const auto t = SteadyClock::now();
  std::thread reader([&] {
    std::vector<char> buf(1 << 20);
    size_t got = 0;
    while (got < total) {
      const ssize_t n = ::recv(s, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
  });
  for (size_t sent = 0; sent < total; sent += frame) {
    for (size_t off = 0; off < frame;) {
      const ssize_t n = ::send(c, chunk.data() + off, frame - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
  }
  reader.join();
  const double secs = seconds_since(t);
  ::close(c);
  ::close(s);
  ::close(lfd);
  return static_cast<double>(total) / secs / 1e6;
}

// MB/s of HMAC-SHA256 alone over `frame`-sized messages on one core: the bound for frames,
// since every byte is MACed once by the sender and once by the receiver (on two threads).
double mac_throughput(size_t total, size_t frame) {
  const std::string key(32, 'm'), data(frame, 'd');
  auto mac = net::HmacSha256::create({reinterpret_cast<const uint8_t*>(key.data()), key.size()});
  if (!mac.ok()) std::abort();
  const auto t = SteadyClock::now();
  for (size_t done = 0; done < total; done += frame) {
    if (!mac->compute({data}).ok()) std::abort();
  }
  return static_cast<double>(total) / seconds_since(t) / 1e6;
}

struct SecureResult {
  std::vector<double> handshakes;
  double mb_per_s = 0;
};

SecureResult secure_run(size_t total, size_t frame, int handshakes) {
  auto secret = std::make_shared<const net::Secret>(
      std::move(net::Secret::from_bytes(std::string(32, 'b'))).value());
  LoopThread server_loop, client_loop;
  constexpr size_t kAckEvery = 16;  // frames per acknowledgement
  constexpr size_t kWindow = 64;    // frames in flight at most
  const size_t frames = total / frame;
  size_t received_bytes = 0;  // server loop thread only
  size_t server_frames = 0;   // server loop thread only
  std::atomic<bool> all_in{false};
  std::unique_ptr<io::SecureChannel> server, client;
  uint16_t port = 0;
  server_loop.sync([&] {
    io::SecureChannelOptions o;
    o.secret = secret;
    o.name = "bench-server";
    o.max_queued_bytes = 64 << 20;
    o.on_message = [&](io::ConnectionId id, std::string payload) {
      received_bytes += payload.size();
      if (++server_frames % kAckEvery == 0) (void)server->send(id, "ack");
      if (received_bytes == frames * frame) {
        all_in = true;
        all_in.notify_all();
      }
    };
    server = std::make_unique<io::SecureChannel>(server_loop.loop, std::move(o));
    port = *server->listen("127.0.0.1", 0);
  });

  SecureResult result;
  std::atomic<int> connected{0};
  size_t acked = 0, sent = 0;  // client loop thread only
  const std::string payload(frame, 's');
  // Keeps at most kWindow frames unacknowledged; runs on the client loop thread.
  auto top_up = [&](io::ConnectionId id) {
    while (sent < frames && sent < acked + kWindow) {
      if (!client->send(id, payload).ok()) std::abort();
      ++sent;
    }
  };
  client_loop.sync([&] {
    io::SecureChannelOptions o;
    o.secret = secret;
    o.name = "bench-client";
    // The window bounds what is unacknowledged; the queue also counts a write in flight.
    o.max_queued_bytes = 2 * kWindow * (frame + 64) + (4 << 20);
    o.on_connected = [&](io::ConnectionId, const std::string&) {
      ++connected;
      connected.notify_all();
    };
    o.on_message = [&](io::ConnectionId id, std::string) {
      acked += kAckEvery;
      top_up(id);
    };
    client = std::make_unique<io::SecureChannel>(client_loop.loop, std::move(o));
  });
  io::ConnectionId id = 0;
  for (int i = 0; i < handshakes; ++i) {
    const auto t = SteadyClock::now();
    client_loop.sync([&] { id = *client->connect("127.0.0.1", port); });
    for (int seen = connected.load(); seen <= i; seen = connected.load()) connected.wait(seen);
    result.handshakes.push_back(seconds_since(t));
    if (i + 1 < handshakes) client_loop.sync([&] { client->close(id); });
  }

  const auto t = SteadyClock::now();
  client_loop.sync([&] { top_up(id); });
  all_in.wait(false);
  result.mb_per_s = static_cast<double>(frames * frame) / seconds_since(t) / 1e6;
  client_loop.sync([&] { client.reset(); });
  server_loop.sync([&] { server.reset(); });
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  size_t total = size_t{256} << 20, frame = size_t{64} << 10;
  int handshakes = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--bytes") {
      total = parse_size(argv[i + 1]).value_or(total);
    } else if (flag == "--frame") {
      frame = parse_size(argv[i + 1]).value_or(frame);
    } else if (flag == "--handshakes") {
      handshakes = std::max(1, std::stoi(argv[i + 1]));
    }
  }
  spdlog::set_level(spdlog::level::warn);
  frame = std::min(frame, net::kDefaultMaxPayload);
  std::printf("sg_bench_net: %zu MiB in %zu-byte frames, %d handshakes, loopback\n", total >> 20,
              frame, handshakes);

  const SecureResult secure = secure_run(total, frame, handshakes);
  const auto plain_hs = plain_handshakes(handshakes);
  const double plain_mb = plain_throughput(total, frame);
  const double mac_mb = mac_throughput(total / 2, frame);

  const double s50 = percentile(secure.handshakes, 0.5) * 1e3;
  const double s99 = percentile(secure.handshakes, 0.99) * 1e3;
  const double p50 = percentile(plain_hs, 0.5) * 1e3;
  std::printf("handshake (connect -> authenticated): median %.3f ms, p99 %.3f ms\n", s50, s99);
  std::printf("plain TCP connect + accept:          median %.3f ms  (secure / plain: %.1fx)\n", p50,
              s50 / p50);
  std::printf("frames (HMAC-SHA256 + sequence):      %.0f MB/s\n", secure.mb_per_s);
  std::printf("plain TCP, same bytes and chunks:     %.0f MB/s  (secure / plain: %.2f)\n", plain_mb,
              secure.mb_per_s / plain_mb);
  std::printf("HMAC-SHA256 alone, one core:          %.0f MB/s  (secure / MAC bound: %.2f)\n",
              mac_mb, secure.mb_per_s / mac_mb);
  return 0;
}
