// For integration tests: a metadata emulator plus a real EventLoop, timers and Beast HTTP
// client, and source configs with short intervals so each case runs in about a second.
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>

#include "agent/aws_source.h"
#include "agent/azure_source.h"
#include "agent/gcp_source.h"
#include "io/event_loop.h"
#include "io/http_client.h"
#include "tests/agent/metadata_emulator.h"
#include "tests/agent/notice_collector.h"

namespace shardguard::testing {

inline agent::BackoffConfig fast_backoff() {
  using namespace std::chrono_literals;
  return agent::BackoffConfig{50ms, 200ms, 2.0, 0.5};
}

struct LiveFixture {
  std::unique_ptr<MetadataEmulator> emulator;
  io::EventLoop loop;
  io::AsioTimerFactory timers{loop};
  io::BeastHttpClient http{loop};
  NoticeCollector seen;
  std::vector<int64_t> seen_at_ms;  // emulator time at which each notice arrived

  explicit LiveFixture(EmulatorScenario scenario) {
    auto started = MetadataEmulator::start(std::move(scenario));
    REQUIRE(started.ok());
    emulator = std::move(started).value();
  }
  // A sink recording notices and their arrival time on the emulator's clock.
  agent::NoticeSource::Callback sink() {
    return [this](const agent::Notice& n) {
      seen.notices.push_back(n);
      seen_at_ms.push_back(emulator->now_ms());
    };
  }
  // Runs the loop until `n` notices arrived or `timeout` passed.
  bool wait_notices(size_t n, std::chrono::milliseconds timeout) {
    return loop.run_until([&] { return seen.notices.size() >= n; }, timeout);
  }
  void run_for(std::chrono::milliseconds d) {
    loop.run_until([] { return false; }, d);
  }

  agent::AwsSourceConfig aws_config() const {
    using namespace std::chrono_literals;
    agent::AwsSourceConfig c;
    c.base_url = emulator->base_url();
    c.poll_interval = 100ms;
    c.maintenance_interval = 100ms;
    c.request_timeout = 300ms;
    c.backoff = fast_backoff();
    return c;
  }
  agent::GcpSourceConfig gcp_config() const {
    using namespace std::chrono_literals;
    agent::GcpSourceConfig c;
    c.base_url = emulator->base_url();
    c.request_timeout = 300ms;
    c.wait_timeout = 2s;
    c.wait_margin = 500ms;
    c.min_rewatch = 100ms;
    c.backoff = fast_backoff();
    return c;
  }
  agent::AzureSourceConfig azure_config() const {
    using namespace std::chrono_literals;
    agent::AzureSourceConfig c;
    c.base_url = emulator->base_url();
    c.poll_interval = 100ms;
    c.request_timeout = 300ms;
    c.first_request_timeout = 300ms;
    c.backoff = fast_backoff();
    return c;
  }
};

}  // namespace shardguard::testing
