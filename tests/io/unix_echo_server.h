// An echo server on its own loop thread for the UnixSocketServer tests: answers
// "echo:<line>", broadcasts "all" on "broadcast", and records what it saw.
// Thread-safety: the accessors lock; stats() and peer() ask the loop thread.
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "io/event_loop.h"
#include "io/unix_socket_server.h"

namespace shardguard::testing {

using namespace std::chrono_literals;

inline std::string socket_path(const std::string& tag) {
  return (std::filesystem::temp_directory_path() /
          ("sg-io-" + tag + "-" + std::to_string(::getpid()) + ".sock"))
      .string();
}

class EchoServer {
 public:
  using ConnectionId = io::ConnectionId;
  explicit EchoServer(const std::string& tag, io::UnixSocketServerOptions options = {}) {
    options.path = socket_path(tag);
    options.on_connect = [this](ConnectionId) { note([&] { ++connects_; }); };
    options.on_disconnect = [this](ConnectionId) { note([&] { ++disconnects_; }); };
    options.on_line = [this](ConnectionId id, std::string line) {
      note([&] {
        lines_.push_back(line);
        line_peers_.push_back(*server_->peer(id));
      });
      if (line == "broadcast") {
        server_->broadcast("all");
      } else if (line != "quiet") {
        (void)server_->send(id, "echo:" + line);
      }
    };
    server_ = std::make_unique<io::UnixSocketServer>(loop_, std::move(options));
    REQUIRE(server_->start().ok());
    thread_ = std::thread([this] { loop_.run(); });
  }
  ~EchoServer() {
    loop_.post([this] { server_->stop(); });
    loop_.stop();
    thread_.join();
    server_.reset();
  }

  const std::string& path() const { return server_->path(); }
  io::UnixSocketClient client() {
    auto c = io::UnixSocketClient::connect(path());
    REQUIRE(c.ok());
    return std::move(c).value();
  }
  // Waits until `pred` holds over the recorded state.
  bool wait(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 5s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, pred);
  }
  int connects() {
    std::lock_guard l(mu_);
    return connects_;
  }
  int disconnects() {
    std::lock_guard l(mu_);
    return disconnects_;
  }
  std::vector<std::string> lines() {
    std::lock_guard l(mu_);
    return lines_;
  }
  std::vector<io::PeerCredentials> line_peers() {
    std::lock_guard l(mu_);
    return line_peers_;
  }
  int connects_unlocked() const { return connects_; }
  int disconnects_unlocked() const { return disconnects_; }
  size_t lines_unlocked() const { return lines_.size(); }

  // Runs `fn` on the loop thread and returns its result.
  template <typename F>
  auto on_loop(F fn) {
    std::promise<decltype(fn())> result;
    loop_.post([&] { result.set_value(fn()); });
    return result.get_future().get();
  }
  io::UnixSocketServerStats stats() {
    return on_loop([this] { return server_->stats(); });
  }
  size_t broadcast(const std::string& line) {
    return on_loop([&] { return server_->broadcast(line); });
  }

 private:
  template <typename F>
  void note(F f) {
    {
      std::lock_guard lock(mu_);
      f();
    }
    cv_.notify_all();
  }

  io::EventLoop loop_;
  std::unique_ptr<io::UnixSocketServer> server_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  int connects_ = 0;
  int disconnects_ = 0;
  std::vector<std::string> lines_;
  std::vector<io::PeerCredentials> line_peers_;
};

}  // namespace shardguard::testing
