#include "agent/backoff.h"

#include <catch2/catch.hpp>

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::agent;

TEST_CASE("backoff: grows, is jittered within bounds, caps, resets") {
  Backoff b({1s, 8s, 2.0, 0.5}, make_random(42));
  Duration expect_base = 1s;
  for (int i = 0; i < 8; ++i) {
    const Duration d = b.next();
    CHECK(d <= expect_base);
    CHECK(d >= expect_base / 2);
    expect_base = std::min<Duration>(expect_base * 2, 8s);
  }
  b.reset();
  CHECK(b.next() <= 1s);
}

TEST_CASE("backoff: the same seed gives the same delays") {
  Backoff a({1s, 30s, 2.0, 0.5}, make_random(9)), b({1s, 30s, 2.0, 0.5}, make_random(9));
  for (int i = 0; i < 5; ++i) CHECK(a.next() == b.next());
}

TEST_CASE("poll timer: interval after an answer, backoff after errors") {
  FakeClock clock;
  PollTimer t(clock, 2s, {1s, 30s, 2.0, 0.0}, make_random(1));
  int runs = 0;
  t.after_error([&] { ++runs; });
  CHECK(t.last_delay() == 1s);
  t.after_error([&] { ++runs; });
  CHECK(t.last_delay() == 2s);
  t.after_answer([&] { ++runs; });
  CHECK(t.last_delay() == 2s);
  t.after_error([&] { ++runs; });
  CHECK(t.last_delay() == 1s);
  clock.advance(1s);
  CHECK(runs == 1);
}

TEST_CASE("poll timer: a notice source never looks away longer than twice its poll interval") {
  // An AWS spot notice comes 2 minutes ahead; with the backoff's 30 s cap a flaky endpoint
  // could hide a quarter of it. The cap is 2 x the interval (4 s here) whatever the config.
  FakeClock clock;
  PollTimer t(clock, 2s, {1s, 30s, 2.0, 0.0}, make_random(1));
  Duration longest{0};
  for (int i = 0; i < 10; ++i) {
    t.after_error([] {});
    longest = std::max(longest, t.last_delay());
  }
  CHECK(longest == 4s);
  // A first retry longer than the cap is cut too.
  PollTimer slow(clock, 1s, {5s, 30s, 2.0, 0.0}, make_random(1));
  slow.after_error([] {});
  CHECK(slow.last_delay() == 2s);
}
