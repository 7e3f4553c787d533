#include "core/time_formats.h"

#include <catch2/catch.hpp>

using namespace std::chrono_literals;
using namespace shardguard;

TEST_CASE("time formats: RFC 3339") {
  auto t = parse_rfc3339("2017-09-18T08:22:00Z");
  REQUIRE(t.ok());
  CHECK(to_unix_ms(*t) == 1505722920000);
  CHECK(format_rfc3339(*t) == "2017-09-18T08:22:00Z");
  CHECK(to_unix_ms(*parse_rfc3339("2017-09-18T10:22:00.250+02:00")) == 1505722920250);
  for (const char* bad : {"2017-09-18", "2017-09-18T08:22:00", "2017-02-30T00:00:00Z",
                          "2017-09-18T25:00:00Z", "2017-09-18T08:22:00Zjunk", ""}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_rfc3339(bad).ok());
  }
}

TEST_CASE("time formats: RFC 1123 and AWS scheduled-event times") {
  auto azure = parse_http_date("Mon, 19 Sep 2016 18:29:47 GMT");
  REQUIRE(azure.ok());
  CHECK(format_rfc3339(*azure) == "2016-09-19T18:29:47Z");
  CHECK(format_rfc1123(*azure) == "Mon, 19 Sep 2016 18:29:47 GMT");
  CHECK(format_rfc3339(*parse_http_date("21 Jan 2019 09:00:43 GMT")) == "2019-01-21T09:00:43Z");
  CHECK(format_rfc3339(*parse_http_date("2 Jan 2006 15:04:05 GMT")) == "2006-01-02T15:04:05Z");
  for (const char* bad : {"", "Mon, 19 Sep 2016 18:29:47", "19 Foo 2016 18:29:47 GMT",
                          "31 Feb 2016 18:29:47 GMT", "19 Sep 2016 18:29:47 CEST"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_http_date(bad).ok());
  }
}
