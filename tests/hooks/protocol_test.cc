// The control protocol's messages: every message survives encode -> decode -> encode, and
// decoding is strict (pure functions, no sockets here; see control_server_test.cc).
#include "hooks/protocol.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <string>

using namespace shardguard;
using namespace shardguard::hooks;

namespace {

template <typename Message, typename Decode>
Message round_trip(const Message& m, Decode decode) {
  const std::string line = encode(m);
  REQUIRE(line.back() == '\n');
  REQUIRE(line.find('\n') == line.size() - 1);
  auto back = decode(line);
  if (!back.ok()) FAIL(back.error().message() << " in " << line);
  CHECK(encode(*back) == line);  // nothing lost or added
  CHECK(message_type(*back) == message_type(m));
  return *back;
}

}  // namespace

TEST_CASE("protocol: every job message round-trips", "[hooks]") {
  auto hello = std::get<Hello>(
      round_trip(JobMessage(Hello{7, 8, 4242, "job-\"quoted\"\n", 3}), decode_job_message));
  CHECK(hello.rank == 7);
  CHECK(hello.world_size == 8);
  CHECK(hello.pid == 4242);
  CHECK(hello.job_id == "job-\"quoted\"\n");
  CHECK(hello.attempt == 3);
  CHECK(
      std::get<Heartbeat>(round_trip(JobMessage(Heartbeat{UINT64_MAX, {}}), decode_job_message)).step ==
      UINT64_MAX);
  CHECK(std::get<CheckpointBegin>(round_trip(JobMessage(CheckpointBegin{12}), decode_job_message))
            .step == 12);
  auto committed = std::get<CheckpointCommitted>(
      round_trip(JobMessage(CheckpointCommitted{1200, "/ckpt/step-000001200/manifest.json"}),
                 decode_job_message));
  CHECK(committed.step == 1200);
  CHECK(committed.manifest == "/ckpt/step-000001200/manifest.json");
  auto failed = std::get<CheckpointFailed>(
      round_trip(JobMessage(CheckpointFailed{5, "disk full \xc3\xa9"}), decode_job_message));
  CHECK(failed.error == "disk full \xc3\xa9");
  CHECK(std::get<Passed>(round_trip(JobMessage(Passed{88}), decode_job_message)).step == 88);
  auto rf = std::get<ResumeFailed>(round_trip(
      JobMessage(ResumeFailed{"/c/step-000000200/manifest.json", "shard-00001-of-00002.safetensors",
                              4194304, "block fails its checksum"}),
      decode_job_message));
  CHECK(rf.file == "shard-00001-of-00002.safetensors");
  CHECK(rf.offset == 4194304);
}

TEST_CASE("protocol: every agent message round-trips", "[hooks]") {
  auto s = std::get<Schedule>(round_trip(AgentMessage(Schedule{100, 60000}), decode_agent_message));
  CHECK(s.every_steps == 100);
  CHECK(s.every_ms == 60000);
  auto now = std::get<CheckpointNow>(round_trip(
      AgentMessage(CheckpointNow{1700000000123, RequestKind::kEmergency, "aws-spot-interruption", 77}),
      decode_agent_message));
  CHECK(now.deadline_unix_ms == 1700000000123);
  CHECK(now.kind == RequestKind::kEmergency);
  CHECK(now.reason == "aws-spot-interruption");
  CHECK(now.at_step == 77);
  for (RequestKind k : {RequestKind::kPeriodic, RequestKind::kAdvisory})
    CHECK(std::get<CheckpointNow>(
              round_trip(AgentMessage(CheckpointNow{1, k, "x", 2}), decode_agent_message))
              .kind == k);
  auto abort = std::get<AbortSave>(
      round_trip(AgentMessage(AbortSave{40, "rank 1: disk full"}), decode_agent_message));
  CHECK(abort.step == 40);
  CHECK(abort.reason == "rank 1: disk full");
  CHECK(std::get<Stop>(round_trip(AgentMessage(Stop{-1}), decode_agent_message)).deadline_unix_ms ==
        -1);
  CHECK(std::get<ErrorReply>(round_trip(AgentMessage(ErrorReply{"bad"}), decode_agent_message))
            .message == "bad");
}

TEST_CASE("protocol: decoding is strict and names the problem", "[hooks]") {
  const auto [line, problem] = GENERATE(table<std::string, std::string>({
      {"", "not JSON"},
      {"\x01\x02garbage", "not JSON"},
      {"[1,2]", "not a JSON object"},
      {R"({"type":"heartbeat","step":1})", "version"},
      {R"({"v":1,"type":"heartbeat","step":1})", "not supported"},
      {R"({"v":2,"type":"heartbeat","step":1,"step":2})", "duplicate"},
      {R"({"v":2,"type":"hello","rank":0,"rank":1,"world_size":2,"pid":1,"job_id":"j","attempt":0})",
       "duplicate"},
      {R"({"v":2,"step":1})", "type"},
      {R"({"v":2,"type":"bogus"})", "unknown message type 'bogus'"},
      {R"({"v":2,"type":"heartbeat"})", "missing field 'step'"},
      {R"({"v":2,"type":"heartbeat","step":"1"})", "field 'step' must be"},
      {R"({"v":2,"type":"heartbeat","step":-1})", "field 'step' must be"},
      {R"({"v":2,"type":"heartbeat","step":1,"extra":0})", "unknown field 'extra'"},
      {R"({"v":2,"type":"hello","rank":2,"world_size":2,"pid":1,"job_id":"j","attempt":0})",
       "rank outside"},
      {R"({"v":2,"type":"hello","rank":4294967296,"world_size":2,"pid":1,"job_id":"j","attempt":0})",
       "32-bit"},
      {R"({"v":2,"type":"checkpoint_now","deadline_unix_ms":1,"kind":"emergency","reason":"x","at_step":1})",
       "unknown message type"},  // an agent message sent by a job
  }));
  auto r = decode_job_message(line);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == ErrorCode::kInvalid);
  CHECK_THAT(r.error().message(), Catch::Contains(problem));
}

TEST_CASE("protocol: a line over the limit is refused before parsing", "[hooks]") {
  std::string big = R"({"v":2,"type":"checkpoint_failed","step":1,"error":")" +
                    std::string(kMaxLineBytes, 'x') + "\"}";
  auto r = decode_job_message(big);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message(), Catch::Contains("exceeds the limit"));
}

TEST_CASE("protocol: a heartbeat's scalar windows round-trip; hostile windows are refused",
          "[hooks]") {
  Heartbeat h{42, {}};
  ScalarWindow loss;
  loss.add(40, 2.5);
  loss.add(41, std::numeric_limits<double>::quiet_NaN());
  loss.add(42, 1.25);
  h.scalars.loss = loss;
  ScalarWindow norm;
  norm.add(42, 0.5);
  h.scalars.grad_norm = norm;
  auto back = std::get<Heartbeat>(round_trip(JobMessage(h), decode_job_message));
  REQUIRE(back.scalars.loss);
  CHECK(back.scalars.loss->first_step == 40);
  CHECK(back.scalars.loss->last_step == 42);
  CHECK(back.scalars.loss->count == 2);
  CHECK(back.scalars.loss->last == 1.25);
  CHECK(back.scalars.loss->max == 2.5);
  CHECK(back.scalars.loss->nonfinite_step == std::optional<uint64_t>(41));
  REQUIRE(back.scalars.grad_norm);
  CHECK(back.scalars.grad_norm->last == 0.5);
  // Without scalars the line is what it always was.
  CHECK(encode(JobMessage(Heartbeat{7, {}})) == "{\"v\":2,\"type\":\"heartbeat\",\"step\":7}\n");

  const std::string w = R"("from":1,"to":2,"n":2,"last":1,"min":1,"max":2)";
  struct Bad {
    std::string scalars;
    const char* problem;
  };
  auto bad = GENERATE_COPY(values<Bad>({
      {"[]", "'scalars' must be an object"},
      {R"({"accuracy":{)" + w + "}}", "unknown scalar 'accuracy'"},
      {R"({"loss":{"from":1,"to":2,"n":2,"last":1,"min":1}})", "missing field 'max'"},
      {R"({"loss":{)" + w + R"(,"extra":1}})", "unknown field 'extra'"},
      {R"({"loss":{"from":3,"to":2,"n":0,"last":0,"min":0,"max":0,"nonfinite_at":3}})",
       "'from' is after 'to'"},
      {R"({"loss":{"from":1,"to":2,"n":9,"last":1,"min":1,"max":2}})", "'n' is more than"},
      {R"({"loss":{"from":1,"to":2,"n":2,"last":5,"min":1,"max":2}})", "'last' must lie"},
      {R"({"loss":{"from":1,"to":2,"n":2,"last":1,"min":1,"max":1e999}})", "finite"},
      {R"({"loss":{"from":1,"to":2,"n":1,"last":1,"min":1,"max":1,"nonfinite_at":9}})",
       "outside from..to"},
      {R"({"loss":{"from":1,"to":2,"n":0,"last":0,"min":0,"max":0}})", "an empty window"},
      {R"({"loss":{)" + w + R"(},"loss":{)" + w + "}}", "not JSON"},
  }));
  const std::string line = R"({"v":2,"type":"heartbeat","step":2,"scalars":)" + bad.scalars + "}";
  auto r = decode_job_message(line);
  REQUIRE_FALSE(r.ok());
  INFO(r.error().message());
  CHECK(r.error().message().find(bad.problem) != std::string::npos);
}
