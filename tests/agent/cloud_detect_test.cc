// Cloud detection against FakeHttpClient: which probe answers decides the sources.
#include "agent/cloud_detect.h"

#include <catch2/catch.hpp>

#include "tests/support/fake_http.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::agent;
using shardguard::testing::FakeHttpClient;

namespace {

std::optional<CloudDetection> detect(FakeHttpClient& http, FakeClock& clock) {
  std::optional<CloudDetection> result;
  int calls = 0;
  detect_clouds(http, CloudDetectOptions{}, [&](CloudDetection d) {
    ++calls;
    result = std::move(d);
  });
  CHECK_FALSE(result.has_value());
  clock.advance(1s);
  CHECK(calls == 1);
  return result;
}

}  // namespace

TEST_CASE("cloud detect: nothing answers (timeouts) -> none, within the timeout") {
  FakeClock clock;
  FakeHttpClient http(clock);
  http.hang("PUT", "/latest/api/token");
  http.hang("GET", "/computeMetadata/v1/instance/id");
  http.hang("GET", "/metadata/instance/compute/name");
  auto d = detect(http, clock);
  REQUIRE(d);
  CHECK_FALSE(d->any());
  CHECK(d->notes.size() == 3);
  for (const auto& r : http.requests()) CHECK(r.timeout == 300ms);
}

TEST_CASE("cloud detect: each provider by its own answer") {
  FakeClock clock;
  FakeHttpClient http(clock);
  const std::string cloud = GENERATE(as<std::string>{}, "aws", "gcp", "azure");
  if (cloud == "aws") http.respond("PUT", "/latest/api/token", 200, "token");
  if (cloud == "gcp") {
    http.respond("GET", "/computeMetadata/v1/instance/id", 200, "123",
                 {{"Metadata-Flavor", "Google"}});
  }
  if (cloud == "azure") http.respond("GET", "/metadata/instance/compute/name", 200, "vm-7\n");
  auto d = detect(http, clock);
  REQUIRE(d);
  CHECK(d->aws == (cloud == "aws"));
  CHECK(d->gcp == (cloud == "gcp"));
  CHECK(d->azure == (cloud == "azure"));
  if (cloud == "azure") CHECK(d->azure_vm_name == "vm-7");
}

TEST_CASE("cloud detect: a 200 without the GCP header is not GCP") {
  FakeClock clock;
  FakeHttpClient http(clock);
  http.respond("GET", "/computeMetadata/v1/instance/id", 200, "123");
  auto d = detect(http, clock);
  REQUIRE(d);
  CHECK_FALSE(d->gcp);
}

TEST_CASE("cloud detect: parse_cloud_mode") {
  CHECK(*parse_cloud_mode("auto") == CloudMode::kAuto);
  CHECK(*parse_cloud_mode("none") == CloudMode::kNone);
  CHECK_FALSE(parse_cloud_mode("AWS").ok());
}
