#include <catch2/catch.hpp>

#include "core/units.h"

using namespace shardguard;
using namespace std::chrono_literals;

TEST_CASE("parse_duration accepts the documented forms", "[core]") {
  auto [text, expected] = GENERATE(table<const char*, std::chrono::nanoseconds>({
      {"90s", 90s},
      {"5m", 5min},
      {"1h30m", 90min},
      {"250ms", 250ms},
      {"1.5s", 1500ms},
      {"2d", 48h},
      {"10us", 10us},
      {"0", 0s},
  }));
  INFO(text);
  auto d = parse_duration(text);
  REQUIRE(d.ok());
  CHECK(*d == expected);
}

TEST_CASE("parse_duration rejects bad text and names it and the reason", "[core]") {
  auto [text, reason] = GENERATE(table<const char*, const char*>({
      {"", "empty"},
      {"90", "missing unit"},
      {"5 min", "missing unit"},
      {"5x", "unknown unit 'x'"},
      {"s", "expected a number"},
      {"1m1h", "largest to smallest"},
      {"-5s", "expected a number"},
      {"1.s", "expected a number"},
      {"99999999999d", "too large"},
  }));
  auto d = parse_duration(text);
  REQUIRE_FALSE(d.ok());
  CHECK(d.error().code() == ErrorCode::kInvalid);
  CHECK_THAT(d.error().message(), Catch::Contains(std::string("'") + text + "'"));
  CHECK_THAT(d.error().message(), Catch::Contains(reason));
}

TEST_CASE("parse_size accepts decimal and binary units", "[core]") {
  auto [text, expected] = GENERATE(table<const char*, uint64_t>({
      {"4096", 4096},
      {"50GiB", 50ull << 30},
      {"5GB", 5'000'000'000ull},
      {"1.5KiB", 1536},
      {"1B", 1},
  }));
  auto s = parse_size(text);
  REQUIRE(s.ok());
  CHECK(*s == expected);
}

TEST_CASE("parse_size rejects bad text and names it and the reason", "[core]") {
  auto [text, reason] = GENERATE(table<const char*, const char*>({
      {"", "empty"},
      {"GiB", "expected a number"},
      {"50gib", "unknown unit 'gib'"},
      {"1.5", "whole number"},
      {"20000PiB", "larger than 2^64"},
      {"5 GB", "unknown unit ' GB'"},
  }));
  auto s = parse_size(text);
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.error().message(), Catch::Contains(std::string("'") + text + "'"));
  CHECK_THAT(s.error().message(), Catch::Contains(reason));
}

TEST_CASE("format_size and format_duration are readable", "[core]") {
  CHECK(format_size(512) == "512 B");
  CHECK(format_size(3ull << 30) == "3.00 GiB");
  CHECK(format_duration(1500ms) == "1.50s");
  CHECK(format_duration(90min) == "1h30m");
}
