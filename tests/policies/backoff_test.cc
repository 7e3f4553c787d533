#include "policies/backoff.h"

#include <catch2/catch.hpp>

using namespace std::chrono_literals;
using shardguard::Duration;
using shardguard::policies::BackoffOptions;
using shardguard::policies::ExponentialBackoff;

namespace {
std::function<double()> fixed(double u) {
  return [u] { return u; };
}
}  // namespace

TEST_CASE("backoff grows by the multiplier and stops at max") {
  ExponentialBackoff b({1s, 10s, 2.0, 0.2}, fixed(0.5));  // u = 0.5: no jitter
  CHECK(b.next() == 1s);
  CHECK(b.next() == 2s);
  CHECK(b.next() == 4s);
  CHECK(b.next() == 8s);
  CHECK(b.next() == 10s);
  CHECK(b.next() == 10s);
  CHECK(b.attempts() == 6);
}

TEST_CASE("backoff jitter stays within +-jitter of the base") {
  const auto [u, expected] = GENERATE(table<double, Duration>({
      {0.0, 800ms},   // 1 - 0.2
      {1.0, 1200ms},  // 1 + 0.2
      {0.25, 900ms},
      {-3.0, 800ms},  // out-of-range draws are clamped
      {7.0, 1200ms},
  }));
  ExponentialBackoff b({1s, 1min, 2.0, 0.2}, fixed(u));
  CHECK(b.next() == expected);
}

TEST_CASE("backoff jitter applies after the cap") {
  ExponentialBackoff b({1s, 4s, 3.0, 0.5}, fixed(1.0));
  CHECK(b.next() == 1500ms);
  CHECK(b.next() == 4500ms);  // 3s * 1.5
  CHECK(b.next() == 6s);      // capped at 4s, then * 1.5
}

TEST_CASE("backoff reset starts over from initial") {
  ExponentialBackoff b({2s, 1min, 2.0, 0.0}, fixed(0.9));
  b.next();
  b.next();
  b.next();
  REQUIRE(b.attempts() == 3);
  b.reset();
  CHECK(b.attempts() == 0);
  CHECK(b.next() == 2s);
}

TEST_CASE("backoff survives many attempts and an empty random source") {
  ExponentialBackoff b({1s, 5min, 10.0, 0.2}, nullptr);
  Duration last{};
  for (int i = 0; i < 2000; ++i) last = b.next();
  CHECK(last == 5min);
}
