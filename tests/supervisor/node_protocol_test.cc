// The coordinator <-> node messages: every event and command that travels round-trips, and
// decoding is strict (unknown fields, repeated keys, wrong types, local-only events refused).
#include "supervisor/node_protocol.h"

#include <catch2/catch.hpp>
#include <limits>

using namespace shardguard;
using namespace shardguard::supervisor;
using namespace shardguard::supervisor::wire;

namespace {

template <typename T>
T event_round_trip(const T& e) {
  const std::string bytes = encode(NodeToCoordinator(Event(e)));
  auto back = decode_from_node(bytes);
  if (!back.ok()) FAIL(back.error().message() << " in " << bytes);
  REQUIRE(std::holds_alternative<Event>(*back));
  CHECK(encode(*back) == bytes);
  return std::get<T>(std::get<Event>(*back));
}

template <typename T>
T command_round_trip(const T& c) {
  const std::string bytes = encode(CoordinatorToNode(Command(c)));
  auto back = decode_from_coordinator(bytes);
  if (!back.ok()) FAIL(back.error().message() << " in " << bytes);
  REQUIRE(std::holds_alternative<Command>(*back));
  CHECK(encode(*back) == bytes);
  return std::get<T>(std::get<Command>(*back));
}

}  // namespace

TEST_CASE("node protocol: node events round-trip", "[supervisor][unit]") {
  CHECK(event_round_trip(event::NodeLaunched{4, 2}).node == 2);
  CHECK(event_round_trip(event::LaunchFailed{4, 2, "pipe: Too many open files", true}).transient);
  CHECK(event_round_trip(event::RankHello{4, 7, 4242}).pid == 4242);
  ScalarWindow loss;
  loss.add(8, 1.5);
  loss.add(9, std::numeric_limits<double>::infinity());
  loss.add(10, 0.75);
  auto hb = event_round_trip(
      event::Heartbeats{4, {{0, 10, StepScalars{loss, std::nullopt}}, {3, UINT64_MAX, {}}}, std::nullopt});
  REQUIRE(hb.ranks.size() == 2);
  CHECK(hb.ranks[1].step == UINT64_MAX);
  CHECK(hb.ranks[1].scalars.empty());
  REQUIRE(hb.ranks[0].scalars.loss);
  CHECK(hb.ranks[0].scalars.loss->first_step == 8);
  CHECK(hb.ranks[0].scalars.loss->last == 0.75);
  CHECK(hb.ranks[0].scalars.loss->nonfinite_step == std::optional<uint64_t>(9));
  CHECK(event_round_trip(event::Heartbeats{4, {}, 99}).all_ranks_at == 99u);
  CHECK(event_round_trip(event::SaveBegan{4, 1, 20}).step == 20);
  CHECK(event_round_trip(event::Committed{4, 20, "/c/step-000000020/manifest.json", 1 << 20}).bytes == 1 << 20);
  CHECK(event_round_trip(event::SaveFailed{4, 1, 20, "No space left on device", true}).no_space);
  CHECK(event_round_trip(event::Passed{4, 1, 22}).step == 22);
  CHECK(event_round_trip(event::ResumeFailed{4, 1, "m", "shard", 2097152, "bad"}).offset == 2097152);
  auto ex = event_round_trip(event::RankExited{4, 3, true, 0, 9, true, "killed by signal 9 (SIGKILL)"});
  CHECK(ex.signal == 9);
  CHECK(ex.during_teardown);
  CHECK(event_round_trip(event::NodeStopped{4, 2}).epoch == 4);
  event::Notice n{2, NoticeAction::kStop, "aws", "spot-interruption", "terminate \"soon\"\n",
                  from_unix_ms(1'800'000'000'123), (uint64_t{2} << 32) | 5, true};
  auto nb = event_round_trip(n);
  CHECK(nb.detail == n.detail);
  CHECK(nb.deadline == n.deadline);
  CHECK(nb.id == n.id);
  CHECK(event_round_trip(event::NodeUnhealthy{2, "xid 79", from_unix_ms(5)}).evidence == "xid 79");
}

TEST_CASE("node protocol: commands round-trip", "[supervisor][unit]") {
  command::Launch l{9, 6, 2, "10.0.0.1", 29509, 400, "/c/step-000000400/manifest.json",
                    {{5, 0, 0, 2}, {7, 1, 2, 2}, {8, 2, 4, 2}}, 12};
  auto lb = command_round_trip(l);
  CHECK(lb.skip_batches == 12);
  CHECK(lb.nodes.size() == 3);
  CHECK(lb.nodes[1].node == 7);
  CHECK(lb.nodes[2].first_rank == 4);
  CHECK(lb.resume_step == 400u);
  CHECK(command_round_trip(command::Launch{1, 2, 2, "h", 1, std::nullopt, "", {{0, 0, 0, 2}}, 0})
            .resume_step == std::nullopt);
  CHECK(command_round_trip(command::TearDown{9, "node 7 lost"}).why == "node 7 lost");
  CHECK_FALSE(command_round_trip(command::TearDown{9, "x"}).kill_by);
  // In an emergency, the deadline by which a node kills what is left travels too.
  CHECK(command_round_trip(command::TearDown{9, "preempted", from_unix_ms(1700000000123)}).kill_by ==
        from_unix_ms(1700000000123));
  auto rel = command_round_trip(command::Release{7, "aws spot-interruption"});
  CHECK(rel.node == 7);
  CHECK(rel.why == "aws spot-interruption");
  auto c = command_round_trip(
      command::CheckpointNow{9, 120, from_unix_ms(1000), "aws-spot", CheckpointKind::kEmergency});
  CHECK(c.at_step == 120);
  CHECK(c.kind == CheckpointKind::kEmergency);
  CHECK(command_round_trip(command::AbortSave{9, 120, "disk"}).step == 120);
  CHECK(command_round_trip(command::CollectHangReport{9, 3}).rank == 3);
  CHECK(command_round_trip(command::AckNotice{77}).notice_id == 77);
}

TEST_CASE("node protocol: join, welcome, finish; decoding is strict", "[supervisor][unit]") {
  Join j{3, "gpu-node-3", "10.0.0.3", 8, "llama", 5, true, "tok3"};
  auto jb = decode_from_node(encode(NodeToCoordinator(j)));
  REQUIRE(jb.ok());
  CHECK(std::get<Join>(*jb).epoch == 5u);
  CHECK(std::get<Join>(*jb).rejoin);
  CHECK(std::get<Join>(*jb).token == "tok3");
  auto wb = decode_from_coordinator(encode(CoordinatorToNode(Welcome{3, "llama", "tok3"})));
  REQUIRE(wb.ok());
  CHECK(std::get<Welcome>(*wb).token == "tok3");
  auto fin = decode_from_coordinator(encode(CoordinatorToNode(Finish{75, "preempted"})));
  REQUIRE(fin.ok());
  CHECK(std::get<Finish>(*fin).exit_code == 75);
  const auto [payload, problem] = GENERATE(table<std::string, std::string>({
      {"{", "not JSON"},
      {R"({"v":1,"type":"beat","x":1})", "x"},
      {R"({"v":1,"type":"beat","type":"join"})", "not JSON"},
      {R"({"v":2,"type":"beat"})", "version"},
      {R"({"v":1,"type":"exec","cmd":"rm -rf /"})", "unknown message type"},
      {R"({"v":1,"type":"event","event":"timer_fired","id":0})", "does not travel"},
      {R"({"v":1,"type":"event","event":"passed","epoch":1,"rank":"0","step":1})", "rank"},
  }));
  auto r = decode_from_node(payload);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == ErrorCode::kInvalid);
  CHECK_THAT(r.error().message(), Catch::Contains(problem));
  CHECK_FALSE(decode_from_coordinator(R"({"v":1,"type":"command","command":"record"})").ok());
  CHECK_FALSE(
      decode_from_coordinator(R"({"v":1,"type":"command","command":"launch","epoch":1})").ok());
}
