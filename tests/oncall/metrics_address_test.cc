// The [metrics] address key: an IP literal to bind the metrics endpoint to (issue 14: scraping
// from another host); anything else is a config error naming the file, line and key.
#include <catch2/catch.hpp>

#include "supervisor/job_config_toml.h"

using shardguard::supervisor::parse_job_config;

TEST_CASE("[metrics] address takes IPv4 and IPv6 literals", "[config][unit]") {
  auto address =
      GENERATE(as<std::string>{}, "0.0.0.0", "127.0.0.1", "10.1.2.3", "::", "::1", "fe80::1");
  auto c = parse_job_config("[metrics]\nport = 9400\naddress = \"" + address + "\"\n", "job.toml");
  REQUIRE(c.ok());
  CHECK(c->metrics_address == address);
  CHECK(c->metrics_port == 9400);
}

TEST_CASE("[metrics] address left out keeps the default (the environment, else loopback)",
          "[config][unit]") {
  auto c = parse_job_config("[metrics]\nport = 9400\n", "job.toml");
  REQUIRE(c.ok());
  CHECK(c->metrics_address.empty());
}

TEST_CASE("A bad [metrics] address names the file, line and key", "[config][unit]") {
  auto [text, message] = GENERATE(table<std::string, std::string>({
      {"[metrics]\naddress = \"localhost\"\n",
       "job.toml:2: metrics.address: expected an IPv4 or IPv6 address like \"0.0.0.0\" or \"::\", "
       "got \"localhost\""},
      {"[metrics]\naddress = \"0.0.0.0:9400\"\n", "job.toml:2: metrics.address: expected an IPv4"},
      {"[metrics]\naddress = \"\"\n", "job.toml:2: metrics.address: expected an IPv4"},
      {"[metrics]\n\naddress = 9400\n",
       "job.toml:3: metrics.address: expected an IP address like \"0.0.0.0\", got integer"},
      {"[metrics]\nadress = \"0.0.0.0\"\n", "job.toml:2: metrics.adress: unknown key"},
  }));
  auto c = parse_job_config(text, "job.toml");
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.error().message(), Catch::StartsWith(message));
}
