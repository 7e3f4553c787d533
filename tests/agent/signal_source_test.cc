// SignalSource with real signals delivered to this process through the EventLoop.
#include "agent/signal_source.h"

#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "io/event_loop.h"
#include "tests/agent/notice_collector.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::agent;

TEST_CASE("signal: SIGTERM via kill() is a notice with deadline = arrival + grace") {
  io::EventLoop loop;
  FakeClock clock;
  SignalSourceConfig config;
  config.signals = {{SIGTERM, 25s}, {SIGUSR1, 90s}};
  SignalSource source(config, loop, clock);
  testing::NoticeCollector seen;
  source.start(seen.sink());

  REQUIRE(::kill(::getpid(), SIGTERM) == 0);
  REQUIRE(loop.run_until([&] { return seen.notices.size() == 1; }, 2s));
  CHECK(seen.notices[0].source == "signal");
  CHECK(seen.notices[0].kind == "sigterm");
  CHECK(seen.notices[0].is_preemption);
  CHECK(seen.notices[0].deadline == clock.wall_now() + 25s);
  CHECK(seen.notices[0].detail == "SIGTERM received");

  // A repeat is a notice too: the supervisor escalates repeated SIGTERMs.
  REQUIRE(::kill(::getpid(), SIGTERM) == 0);
  REQUIRE(loop.run_until([&] { return seen.notices.size() == 2; }, 2s));
  CHECK(seen.notices[1].kind == "sigterm");
  REQUIRE(::kill(::getpid(), SIGUSR1) == 0);
  REQUIRE(loop.run_until([&] { return seen.notices.size() == 3; }, 2s));
  CHECK(seen.notices[2].kind == "sigusr1");
  CHECK(seen.notices[2].deadline == clock.wall_now() + 90s);
  loop.run_for(50ms);
  CHECK(seen.notices.size() == 3);
  source.stop();
}

TEST_CASE("signal: parse_signal and signal_name") {
  CHECK(*parse_signal("SIGUSR1") == SIGUSR1);
  CHECK(*parse_signal("usr2") == SIGUSR2);
  CHECK(*parse_signal("15") == SIGTERM);
  CHECK_FALSE(parse_signal("SIGKILL").ok());
  CHECK_FALSE(parse_signal("nope").ok());
  CHECK_FALSE(parse_signal("0").ok());
  CHECK(signal_name(SIGTERM) == "SIGTERM");
}
