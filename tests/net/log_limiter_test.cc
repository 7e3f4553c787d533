// LogLimiter with time as an argument: ten lines per cause per second, then a count.
#include "net/log_limiter.h"

#include <catch2/catch.hpp>

using namespace std::chrono_literals;
using shardguard::SteadyTime;
using shardguard::net::LogLimiter;

TEST_CASE("Ten lines per cause per second pass; the rest are counted and reported once") {
  LogLimiter limiter;
  const SteadyTime t0{};
  int admitted = 0;
  for (int i = 0; i < 25; ++i) admitted += limiter.admit(1, t0 + 1ms * i) ? 1 : 0;
  CHECK(admitted == 10);
  CHECK(limiter.admit(2, t0 + 30ms));  // another cause has its own budget
  CHECK(limiter.has_suppressed());
  CHECK(limiter.take_suppressed(t0 + 500ms).empty());  // the window has not ended
  auto held = limiter.take_suppressed(t0 + 1s);
  REQUIRE(held.size() == 1);
  CHECK(held[0].cause == 1);
  CHECK(held[0].count == 15);
  CHECK(limiter.take_suppressed(t0 + 2s).empty());  // reported once
  CHECK_FALSE(limiter.has_suppressed());
  CHECK(limiter.admit(1, t0 + 1100ms));  // a new window
}
