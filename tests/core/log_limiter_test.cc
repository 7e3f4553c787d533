// LogLimiter with a FakeClock: N lines per window per cause, then one summary line.
#include "core/log_limiter.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace shardguard;
using namespace std::chrono_literals;

namespace {

struct Captured {
  std::vector<std::string> lines;
  LogLimiter::Sink sink() {
    return [this](LogLevel, const std::string& line) { lines.push_back(line); };
  }
};

LogLimiterOptions three_per_second() {
  LogLimiterOptions o;
  o.max_lines = 3;
  o.window = 1s;
  return o;
}

}  // namespace

TEST_CASE("log limiter: N lines per window, then a count when the window ends", "[core]") {
  FakeClock clock;
  Captured out;
  LogLimiter limiter(clock, three_per_second(), out.sink());
  int written = 0;
  for (int i = 0; i < 10; ++i) written += limiter.warn("slow reader", "line " + std::to_string(i));
  CHECK(written == 3);
  CHECK(out.lines == std::vector<std::string>{"line 0", "line 1", "line 2"});
  CHECK(limiter.suppressed_total() == 7);

  clock.advance(500ms);
  limiter.flush();  // the window has not ended: nothing yet
  CHECK(out.lines.size() == 3);
  CHECK_FALSE(limiter.warn("slow reader", "still suppressed"));

  clock.advance(500ms);
  CHECK(limiter.warn("slow reader", "next window"));
  REQUIRE(out.lines.size() == 5);
  CHECK(out.lines[3] == "slow reader: ... and 8 more in the last 1.00s");
  CHECK(out.lines[4] == "next window");
}

TEST_CASE("log limiter: causes are counted apart", "[core]") {
  FakeClock clock;
  Captured out;
  LogLimiter limiter(clock, three_per_second(), out.sink());
  for (int i = 0; i < 5; ++i) {
    limiter.warn("a", "a" + std::to_string(i));
    limiter.warn("b", "b" + std::to_string(i));
  }
  CHECK(out.lines == std::vector<std::string>{"a0", "b0", "a1", "b1", "a2", "b2"});
  clock.advance(1s);
  limiter.flush();
  CHECK(out.lines.size() == 8);
  CHECK(out.lines[6] == "a: ... and 2 more in the last 1.00s");
  CHECK(out.lines[7] == "b: ... and 2 more in the last 1.00s");
  limiter.flush();  // said once
  CHECK(out.lines.size() == 8);
}

TEST_CASE("log limiter: with timers the summary comes when the window ends", "[core]") {
  FakeClock clock;
  Captured out;
  {
    LogLimiter limiter(clock, three_per_second(), out.sink(), &clock);
    for (int i = 0; i < 1000; ++i) limiter.warn("flood", "x");
    CHECK(out.lines.size() == 3);
    CHECK(clock.pending_timers() == 1);
    clock.advance(999ms);
    CHECK(out.lines.size() == 3);
    clock.advance(1ms);
    REQUIRE(out.lines.size() == 4);
    CHECK(out.lines[3] == "flood: ... and 997 more in the last 1.00s");
    // A quiet cause leaves nothing armed behind.
    clock.advance(10s);
    CHECK(out.lines.size() == 4);
    for (int i = 0; i < 4; ++i) limiter.warn("flood", "y");
  }
  // Destroying the limiter writes what is pending and cancels its timer.
  CHECK(out.lines.back() == "flood: ... and 1 more in the last 1.00s");
  CHECK(clock.pending_timers() == 0);
}

TEST_CASE("log limiter: a steady trickle under the limit is never summarised", "[core]") {
  FakeClock clock;
  Captured out;
  LogLimiter limiter(clock, three_per_second(), out.sink(), &clock);
  for (int i = 0; i < 30; ++i) {
    CHECK(limiter.warn("trickle", "t"));
    clock.advance(400ms);
  }
  CHECK(out.lines.size() == 30);
  CHECK(limiter.suppressed_total() == 0);
}
