#include "io/event_loop.h"

#include <catch2/catch.hpp>
#include <thread>

using namespace std::chrono_literals;
using shardguard::Duration;
using shardguard::FakeClock;
using shardguard::Timer;
using shardguard::TimerFactory;
using shardguard::io::AsioTimerFactory;
using shardguard::io::EventLoop;

namespace {

// A tiny component that depends only on TimerFactory, as production code does: it counts
// ticks every `period` until stopped.
class Ticker {
 public:
  Ticker(TimerFactory& timers, Duration period) : timer_(timers.make_timer()), period_(period) {}
  void start() {
    timer_->arm(period_, [this] { tick(); });
  }
  void stop() { timer_->cancel(); }
  int ticks() const { return ticks_; }

 private:
  void tick() {
    ++ticks_;
    start();
  }
  std::unique_ptr<Timer> timer_;
  Duration period_;
  int ticks_ = 0;
};

}  // namespace

TEST_CASE("a fake clock drives a timer-based component without sleeping") {
  FakeClock clock;
  Ticker ticker(clock, 10s);
  ticker.start();
  clock.advance(9s);
  CHECK(ticker.ticks() == 0);
  clock.advance(1s);
  CHECK(ticker.ticks() == 1);
  clock.advance(1h);
  CHECK(ticker.ticks() == 361);
  ticker.stop();
  CHECK(clock.pending_timers() == 0);
  clock.advance(1h);
  CHECK(ticker.ticks() == 361);
}

TEST_CASE("AsioTimerFactory fires on a real loop after the delay") {
  EventLoop loop;
  AsioTimerFactory timers(loop);
  auto timer = timers.make_timer();
  bool fired = false;
  const auto start = std::chrono::steady_clock::now();
  timer->arm(20ms, [&] { fired = true; });
  CHECK(timer->armed());
  REQUIRE(loop.run_until([&] { return fired; }, 2s));
  CHECK(std::chrono::steady_clock::now() - start >= 20ms);
  CHECK_FALSE(timer->armed());
}

TEST_CASE("AsioTimer: cancel, re-arm and destroy stop the old callback") {
  EventLoop loop;
  AsioTimerFactory timers(loop);
  int a = 0, b = 0;

  SECTION("cancel") {
    auto timer = timers.make_timer();
    timer->arm(1ms, [&] { ++a; });
    timer->cancel();
    CHECK_FALSE(timer->armed());
    loop.run_for(30ms);
    CHECK(a == 0);
  }
  SECTION("re-arm replaces the deadline and the callback") {
    auto timer = timers.make_timer();
    timer->arm(1ms, [&] { ++a; });
    timer->arm(5ms, [&] { ++b; });
    loop.run_for(50ms);
    CHECK(a == 0);
    CHECK(b == 1);
  }
  SECTION("cancel of a timer whose expiry is already queued") {
    // Both expire in the same pass and each cancels the other, whose handler is then
    // already queued as a success.
    auto first = timers.make_timer();
    auto second = timers.make_timer();
    first->arm(1ms, [&] {
      ++a;
      second->cancel();
    });
    second->arm(1ms, [&] {
      ++b;
      first->cancel();
    });
    std::this_thread::sleep_for(5ms);
    loop.run_for(20ms);
    CHECK(a + b == 1);  // whichever runs first, the other never does
  }
  SECTION("destroying the timer") {
    auto timer = timers.make_timer();
    timer->arm(1ms, [&] { ++a; });
    timer.reset();
    loop.run_for(20ms);
    CHECK(a == 0);
  }
  SECTION("a periodic component on real timers") {
    Ticker ticker(timers, 2ms);
    ticker.start();
    REQUIRE(loop.run_until([&] { return ticker.ticks() >= 3; }, 2s));
    ticker.stop();
  }
}

TEST_CASE("EventLoop post, poll, run and stop") {
  EventLoop loop;
  int ran = 0;

  SECTION("posted work runs on run() and never inline") {
    loop.post([&] { ++ran; });
    CHECK(ran == 0);
    CHECK(loop.run() == 1);
    CHECK(ran == 1);
  }
  SECTION("a loop that ran out of work runs again") {
    loop.post([&] { ++ran; });
    loop.poll();
    loop.post([&] { ++ran; });
    loop.run();
    CHECK(ran == 2);
  }
  SECTION("stop() before run is consumed by that run") {
    loop.stop();
    loop.post([&] { ++ran; });
    CHECK(loop.run() == 0);
    CHECK(ran == 0);
    loop.run();
    CHECK(ran == 1);
  }
  SECTION("stop() from another thread ends run()") {
    AsioTimerFactory timers(loop);
    auto timer = timers.make_timer();
    timer->arm(1h, [] {});
    std::thread stopper([&] {
      std::this_thread::sleep_for(20ms);
      loop.stop();
    });
    const auto start = std::chrono::steady_clock::now();
    loop.run();
    stopper.join();
    CHECK(std::chrono::steady_clock::now() - start < 5s);
  }
  SECTION("post() from another thread reaches the loop thread") {
    std::thread poster([&] { loop.post([&] { ++ran; }); });
    CHECK(loop.run_until([&] { return ran == 1; }, 2s));
    poster.join();
  }
}
