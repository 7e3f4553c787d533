#include <catch2/catch.hpp>

#include "core/logging.h"

using namespace shardguard;

TEST_CASE("json_escape makes any message a valid JSON string body", "[core]") {
  CHECK(json_escape("plain") == "plain");
  CHECK(json_escape("a\"b\\c\nd\te") == "a\\\"b\\\\c\\nd\\te");
  CHECK(json_escape(std::string("\x01", 1)) == "\\u0001");
}

TEST_CASE("setup_logging rejects unknown levels and formats by name", "[core]") {
  auto st = setup_logging({LogFormat::kText, "loud"});
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message(), Catch::Contains("'loud'"));
  CHECK_FALSE(parse_log_format("xml").ok());
  CHECK(setup_logging({LogFormat::kJson, "warn"}).ok());
}
