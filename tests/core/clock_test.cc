#include <catch2/catch.hpp>

#include <vector>

#include "core/clock.h"

using namespace shardguard;
using namespace std::chrono_literals;

TEST_CASE("FakeClock drives timers without sleeping, in deadline order", "[core]") {
  FakeClock clock;
  const auto start = clock.now();
  const auto wall_start = clock.wall_now();
  std::vector<std::string> fired;
  auto a = clock.make_timer();
  auto b = clock.make_timer();
  auto c = clock.make_timer();
  a->arm(30s, [&] { fired.push_back("a@" + std::to_string((clock.now() - start) / 1s)); });
  b->arm(10s, [&] { fired.push_back("b@" + std::to_string((clock.now() - start) / 1s)); });
  c->arm(20s, [&] { fired.push_back("c"); });
  c->cancel();
  CHECK(clock.pending_timers() == 2);

  clock.advance(5s);
  CHECK(fired.empty());
  clock.advance(60s);
  CHECK(fired == std::vector<std::string>{"b@10", "a@30"});
  CHECK(clock.now() - start == 65s);
  CHECK(clock.wall_now() - wall_start == 65s);
  CHECK_FALSE(a->armed());
  CHECK(clock.pending_timers() == 0);
}

TEST_CASE("A FakeClock timer can re-arm itself from its callback", "[core]") {
  FakeClock clock;
  auto t = clock.make_timer();
  int ticks = 0;
  std::function<void()> tick = [&] {
    if (++ticks < 5) t->arm(1s, tick);
  };
  t->arm(1s, tick);
  clock.advance(10s);
  CHECK(ticks == 5);
}

TEST_CASE("Destroying a timer cancels it", "[core]") {
  FakeClock clock;
  bool fired = false;
  {
    auto t = clock.make_timer();
    t->arm(1s, [&] { fired = true; });
  }
  clock.advance(2s);
  CHECK_FALSE(fired);
}

TEST_CASE("unix ms conversions round-trip", "[core]") {
  CHECK(to_unix_ms(from_unix_ms(1'700'000'123'456)) == 1'700'000'123'456);
}
