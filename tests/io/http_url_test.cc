#include <catch2/catch.hpp>

#include "io/http_client.h"

using shardguard::ErrorCode;
using shardguard::io::HttpHeaders;
using shardguard::io::parse_url;

TEST_CASE("parse_url accepts http URLs") {
  struct Row {
    const char* url;
    const char* host;
    int port;
    const char* target;
  };
  auto row = GENERATE(values<Row>({
      {"http://169.254.169.254/latest/api/token", "169.254.169.254", 80, "/latest/api/token"},
      {"http://127.0.0.1:8080", "127.0.0.1", 8080, "/"},
      {"HTTP://metadata.google.internal/computeMetadata/v1/instance/preempted?wait_for_change=true",
       "metadata.google.internal", 80,
       "/computeMetadata/v1/instance/preempted?wait_for_change=true"},
      {"http://host?x=1", "host", 80, "/?x=1"},
      {"http://[::1]:9000/a#frag", "::1", 9000, "/a"},
  }));
  auto parsed = parse_url(row.url);
  INFO(row.url);
  REQUIRE(parsed.ok());
  CHECK(parsed->host == row.host);
  CHECK(parsed->port == row.port);
  CHECK(parsed->target == row.target);
}

TEST_CASE("parse_url rejects what it cannot fetch, naming the URL") {
  auto url = GENERATE("https://example.com/", "ftp://x/", "http://", "http://:80/", "http://h:0/",
                      "http://h:70000/", "http://h:12ab/", "http://user@h/", "http://h /x",
                      "http://[::1/", "http://h:/");
  auto parsed = parse_url(url);
  INFO(url);
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.error().code() == ErrorCode::kInvalid);
  CHECK_THAT(parsed.error().message(), Catch::Contains(std::string("'") + url + "'"));
}

TEST_CASE("HttpHeaders lookups ignore case") {
  HttpHeaders headers{{"Content-Type", "text/plain"}, {"ETag", "\"1\""}};
  CHECK(headers.get("content-type") == "text/plain");
  CHECK(headers.get("ETAG") == "\"1\"");
  CHECK_FALSE(headers.get("Missing").has_value());
  headers.set("etag", "\"2\"");
  CHECK(headers.get("ETag") == "\"2\"");
  CHECK(headers.size() == 2);
}
