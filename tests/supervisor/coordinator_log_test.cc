// The coordinator's record (supervisor/coordinator_log.h) as JSON: what a successor reads to
// take the job over, parsed strictly (it lives in a checkpoint location others may reach).
#include "supervisor/coordinator_log.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <iterator>

using namespace shardguard;
using namespace shardguard::supervisor;

TEST_CASE("the coordinator record keeps the notices under way, field for field",
          "[supervisor][unit]") {
  CoordinatorState state;
  state.job_id = "j";
  state.epoch = 4;
  state.running = true;
  state.layout = {{0, 0, 0, 2}, {3, 1, 2, 2}};
  state.world_size = 4;
  state.members = {{0, "10.0.0.1"}, {3, "10.0.0.4"}};
  state.last_committed = 1200;
  event::Notice n;
  n.node = 3;
  n.source = "drain";
  n.kind = "drain";
  n.detail = "drain: maintenance";
  n.deadline = from_unix_ms(1700000030000);
  n.id = (uint64_t{3} << 32) | 7;
  n.preemption = false;
  state.notices.push_back(n);
  auto parsed = parse_coordinator_state(coordinator_state_to_json(state));
  REQUIRE(parsed.ok());
  CHECK(*parsed == state);
  // A record of a build before notices were kept still reads.
  std::string old = coordinator_state_to_json(state);
  const auto at = old.find(",\"notices\":");
  REQUIRE(at != std::string::npos);
  old.erase(at, old.find(']', at) + 1 - at);
  auto before = parse_coordinator_state(old);
  REQUIRE(before.ok());
  CHECK(before->notices.empty());
}

TEST_CASE("the coordinator record refuses a notice with a field of the wrong type",
          "[machine][multinode][unit]") {
  CoordinatorState state;
  state.job_id = "j";
  event::Notice n;
  n.node = 1;
  n.source = "aws";
  n.kind = "spot-interruption";
  n.detail = "aws-spot-interruption";
  n.deadline = from_unix_ms(1700000000000);
  state.notices.push_back(n);
  std::string text = coordinator_state_to_json(state);
  REQUIRE(parse_coordinator_state(text).ok());
  const auto at = text.find("\"preemption\":true");
  REQUIRE(at != std::string::npos);
  text.replace(at, std::string("\"preemption\":true").size(), "\"preemption\":1");
  auto bad = parse_coordinator_state(text);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message(), Catch::Contains("preemption"));
}

TEST_CASE("the fuzz target's seed records parse (a record with a notice, one of an older build)",
          "[supervisor][unit]") {
  const char* src = std::getenv("SHARDGUARD_SOURCE_DIR");
  REQUIRE(src != nullptr);
  for (const char* name : {"running-with-notice.json", "pending-older-build.json"}) {
    INFO(name);
    std::ifstream in(std::string(src) + "/fuzz/corpus/coordinator/" + name);
    REQUIRE(in);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto s = parse_coordinator_state(text);
    REQUIRE(s.ok());
    CHECK(s->job_id == "j");
  }
}
