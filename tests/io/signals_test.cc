#include "io/signals.h"

#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "io/event_loop.h"

using namespace std::chrono_literals;
using shardguard::ErrorCode;
using shardguard::io::EventLoop;
using shardguard::io::GracefulStop;
using shardguard::io::SignalWatcher;

TEST_CASE("SignalWatcher delivers signals to their callbacks on the loop") {
  EventLoop loop;
  SignalWatcher watcher(loop);
  std::vector<int> seen;
  REQUIRE(watcher.watch(SIGUSR1, [&](int sig) { seen.push_back(sig); }).ok());
  REQUIRE(watcher.watch(SIGTERM, [&](int sig) { seen.push_back(sig); }).ok());

  ::raise(SIGUSR1);
  CHECK(seen.empty());  // never inside the signal handler
  REQUIRE(loop.run_until([&] { return seen.size() == 1; }, 2s));
  CHECK(seen[0] == SIGUSR1);

  ::kill(::getpid(), SIGTERM);
  REQUIRE(loop.run_until([&] { return seen.size() == 2; }, 2s));
  CHECK(seen[1] == SIGTERM);

  ::raise(SIGUSR1);  // still watched after a delivery
  REQUIRE(loop.run_until([&] { return seen.size() == 3; }, 2s));
  watcher.cancel();
}

TEST_CASE("SignalWatcher refuses signals that cannot be caught") {
  EventLoop loop;
  SignalWatcher watcher(loop);
  auto sig = GENERATE(SIGKILL, SIGSTOP, 0, 1000);
  auto status = watcher.watch(sig, [](int) {});
  REQUIRE_FALSE(status.ok());
  CHECK(status.error().code() == ErrorCode::kInvalid);
}

TEST_CASE("GracefulStop calls on_stop once and lets run() return by itself") {
  EventLoop loop;
  int stops = 0, which = 0;
  GracefulStop stop(loop, [&](int sig) {
    ++stops;
    which = sig;
  });
  ::kill(::getpid(), SIGTERM);
  const auto start = std::chrono::steady_clock::now();
  loop.run_for(5s);  // returns early: after on_stop nothing is left to wait for
  CHECK(std::chrono::steady_clock::now() - start < 4s);
  CHECK(stops == 1);
  CHECK(which == SIGTERM);
  CHECK(stop.triggered());
}
