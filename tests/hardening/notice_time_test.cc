// Finding: an AWS notice time after 2262 overflowed to "now" (WallTime is int64 nanoseconds),
// leaving no time for the emergency checkpoint. Times past the representable range are
// clamped to its end (with room for deadline arithmetic), for every provider's format.
#include <catch2/catch.hpp>

#include "agent/aws_parse.h"
#include "core/time_formats.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::agent;

TEST_CASE("notice times past 2262 are a deadline far away, never now", "[unit]") {
  const WallTime now = from_unix_ms(1'800'000'000'000);  // 2027
  const WallTime latest{std::chrono::seconds(kLatestParsedUnixSeconds)};
  const std::string when =
      GENERATE(as<std::string>{}, "2262-04-12T00:00:00Z", "2263-01-01T00:00:00Z",
               "9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59-23:59");
  INFO(when);
  auto n = parse_aws_spot_action(R"({"action":"terminate","time":")" + when + R"("})", now);
  REQUIRE(n.ok());
  CHECK(n->deadline == latest);
  CHECK(n->deadline - now > std::chrono::hours(24 * 365 * 200));
  // The arithmetic done on a deadline (a margin off, a grace on) stays representable.
  CHECK((n->deadline + std::chrono::hours(24 * 30)) > n->deadline);
  CHECK(to_unix_ms(n->deadline) == kLatestParsedUnixSeconds * 1000);
}

TEST_CASE("every provider's time format clamps the same way", "[unit]") {
  const WallTime latest{std::chrono::seconds(kLatestParsedUnixSeconds)};
  const WallTime earliest{std::chrono::seconds(kEarliestParsedUnixSeconds)};
  CHECK(*parse_http_date("Fri, 31 Dec 9999 23:59:59 GMT") == latest);
  CHECK(*parse_http_date("1 Jan 0001 00:00:00 GMT") == earliest);
  CHECK(*parse_rfc3339("0000-01-01T00:00:00Z") == earliest);
  // Inside the range nothing changes.
  CHECK(to_unix_ms(*parse_rfc3339("2262-01-01T00:00:00Z")) == kLatestParsedUnixSeconds * 1000);
  CHECK(to_unix_ms(*parse_rfc3339("2261-12-31T23:59:59.5Z")) ==
        kLatestParsedUnixSeconds * 1000 - 500);
  CHECK(to_unix_ms(*parse_rfc3339("2017-09-18T10:22:00.250+02:00")) == 1505722920250);
}
