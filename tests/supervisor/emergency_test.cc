// The decision core's emergency flow in made-up time: one at_step for every rank, re-issued
// when a rank passed it; notices during backoff, launch and a checkpoint; two notices at once
// (earliest deadline wins); short and past deadlines; failures that end the wait at once.
#include <catch2/catch.hpp>

#include "core/exit_codes.h"
#include "tests/supervisor/machine_driver.h"

using namespace shardguard;
using namespace shardguard::testing;

namespace {

MachineConfig cfg() {
  MachineConfig c;
  c.nproc_per_node = 2;
  c.backoff = {1s, 60s, 2.0, 0.0};
  c.safety_margin = 2s;
  c.drain_wait = 10s;
  return c;
}

}  // namespace

TEST_CASE("a notice asks every rank for one step, commits, drains, and exits 75",
          "[machine][emergency][unit]") {
  MachineDriver d(cfg());
  d.start_single(100);
  d.hello_all();
  d.beat(110);
  d.advance(1s);
  d.beat(120);  // 10 steps/s
  const WallTime noticed = d.now().wall;
  d.notice(30s, "spot-interruption", 0, 77);
  auto c = d.last<command::CheckpointNow>();
  REQUIRE(c);
  CHECK(c->kind == CheckpointKind::kEmergency);
  // 10 steps/s x 0.3 s latency + 1 = 4 steps of margin.
  CHECK(c->at_step == 124);
  CHECK(c->deadline == d.now().wall + 28s);  // minus the safety margin
  CHECK(c->reason == "aws-spot-interruption");
  CHECK(d.machine().phase() == Phase::kCheckpointing);
  CHECK(d.timer_in(TimerId::kDeadline) == Duration(28s));
  d.advance(2s);
  d.commit(124);
  auto ack = d.last<command::AckNotice>();
  REQUIRE(ack);
  CHECK(ack->notice_id == 77);
  CHECK(d.machine().phase() == Phase::kDraining);
  CHECK_FALSE(d.timer_armed(TimerId::kDeadline));
  d.exit_rank(0, 75);
  CHECK(d.all_of<command::TearDown>().empty());
  d.exit_rank(1, 75);
  REQUIRE(d.last<command::TearDown>());
  // A rank that ignores the stop is killed before the machine's time, whatever the term
  // grace (3 s by default, over the 2 s margin): half the margin before the notice's deadline.
  CHECK(d.last<command::TearDown>()->kill_by == noticed + 29s);
  d.confirm_teardown();
  REQUIRE(d.machine().finished());
  CHECK(d.machine().exit_code() == kExitPreempted);
  CHECK(d.last<command::Finish>()->summary == "emergency checkpoint of step 124 committed");
}

TEST_CASE("a rank already past at_step: re-issued for all ranks with a later step",
          "[machine][emergency][unit]") {
  MachineDriver d(cfg());
  d.start_single();
  d.beat(50);
  d.notice(30s);
  auto first = d.last<command::CheckpointNow>();
  REQUIRE(first);
  CHECK(first->at_step == 52);
  d.feed(event::Passed{d.epoch(), 1, 53});
  auto second = d.last<command::CheckpointNow>();
  REQUIRE(d.all_of<command::CheckpointNow>().size() == 2);
  CHECK(second->at_step > 53);
  CHECK(second->deadline == first->deadline);
  CHECK_THAT(d.last_field("checkpoint_now", "note"), Catch::Contains("rank 1 was already at step 53"));
  // A late `passed` for the first request changes nothing.
  d.feed(event::Passed{d.epoch(), 0, 52});
  CHECK(d.all_of<command::CheckpointNow>().size() == 2);
  // The commit of the old step does not count; the new one does.
  d.commit(52);
  CHECK(d.machine().phase() == Phase::kCheckpointing);
  d.commit(second->at_step);
  CHECK(d.machine().phase() == Phase::kDraining);
}

TEST_CASE("two notices: the earliest deadline wins; a later one changes nothing",
          "[machine][emergency][unit]") {
  MachineDriver d(cfg());
  d.start_single();
  d.beat(10);
  d.notice(40s, "drain");
  REQUIRE(d.timer_in(TimerId::kDeadline) == Duration(38s));
  d.advance(1s);
  d.notice(6s, "spot-interruption");
  CHECK(d.timer_in(TimerId::kDeadline) == Duration(4s));
  auto c = d.last<command::CheckpointNow>();
  REQUIRE(d.all_of<command::CheckpointNow>().size() == 2);
  CHECK(c->deadline == d.now().wall + 4s);
  CHECK(d.all_of<command::CheckpointNow>()[0].at_step == c->at_step);
  CHECK(d.records("notice").size() == 2);  // every notice is an event
  CHECK(d.records("deadline_shortened").size() == 1);
  d.notice(100s, "maintenance");
  CHECK(d.all_of<command::CheckpointNow>().size() == 2);
  CHECK(d.timer_in(TimerId::kDeadline) == Duration(4s));
  // Rank 1 wrote its part, rank 0 never did: the failure names rank 0.
  d.feed(event::ShardWritten{d.epoch(), 1, c->at_step});
  d.advance(4s);
  REQUIRE(d.last<command::TearDown>());
  CHECK(d.last<command::TearDown>()->why == "emergency deadline reached");
  d.confirm_teardown();
  CHECK(d.machine().exit_code() == kExitPreempted);
  CHECK_THAT(d.last<command::Finish>()->summary,
             Catch::Contains("FAILED: not committed before the deadline (rank 0 of 2 had not "
                             "written its part of step " +
                             std::to_string(c->at_step) + ")"));
}

TEST_CASE("deadlines shorter than the safety margin, or already past, are still tried",
          "[machine][emergency][unit]") {
  MachineDriver d(cfg());
  d.start_single();
  d.beat(10);
  SECTION("shorter than the margin: the ranks get until the deadline itself") {
    d.notice(1s);
    auto c = d.last<command::CheckpointNow>();
    REQUIRE(c);
    CHECK(c->deadline == d.now().wall + 1s);
    CHECK(d.timer_in(TimerId::kDeadline) == Duration(1s));
  }
  SECTION("already past: the safety margin from now") {
    d.notice(-5s);
    auto c = d.last<command::CheckpointNow>();
    REQUIRE(c);
    CHECK(c->deadline == d.now().wall + 2s);
  }
}

TEST_CASE("a notice during backoff ends the job at once with 75", "[machine][emergency][unit]") {
  MachineDriver d(cfg());
  d.start_single(300);
  d.beat(310);
  d.exit_rank(0, 1);
  d.confirm_teardown();
  REQUIRE(d.machine().phase() == Phase::kBackoff);
  d.notice(30s);
  REQUIRE(d.machine().finished());
  CHECK(d.machine().exit_code() == kExitPreempted);
  CHECK_FALSE(d.timer_armed(TimerId::kBackoff));
  CHECK_THAT(d.last<command::Finish>()->summary,
             Catch::Contains("no ranks were running, nothing to save; resume will start from step 300"));
}

TEST_CASE("a notice while the ranks start: at_step is past the resume step",
          "[machine][emergency][unit]") {
  MachineDriver d(cfg());
  d.start(0);
  d.feed(event::NodeJoined{0, ""});
  SECTION("before the launch (looking for the checkpoint): nothing to save, exit 75") {
    d.notice(30s);
    REQUIRE(d.machine().finished());
    CHECK(d.machine().exit_code() == kExitPreempted);
    CHECK(d.all_of<command::Launch>().empty());
  }
  SECTION("after the launch, before any heartbeat") {
    d.resume(1000);
    d.notice(30s);
    auto c = d.last<command::CheckpointNow>();
    REQUIRE(c);
    CHECK(c->at_step == 1002);
  }
}

TEST_CASE("a notice during a periodic checkpoint turns it into the emergency",
          "[machine][emergency][unit]") {
  MachineConfig c = cfg();
  c.interval_mode = IntervalMode::kTime;
  c.every = 60s;
  MachineDriver d(c);
  d.start_single();
  d.beat(10);
  d.advance(60s);
  auto periodic = d.last<command::CheckpointNow>();
  REQUIRE(periodic);
  REQUIRE(periodic->kind == CheckpointKind::kPeriodic);
  d.feed(event::SaveBegan{d.epoch(), 0, periodic->at_step});
  d.notice(30s);
  auto e = d.last<command::CheckpointNow>();
  CHECK(e->kind == CheckpointKind::kEmergency);
  CHECK(e->at_step >= periodic->at_step);
  d.commit(e->at_step);
  CHECK(d.machine().phase() == Phase::kDraining);
}

TEST_CASE("a rank that exits or fails its save during the emergency ends the wait at once",
          "[machine][emergency][unit]") {
  MachineDriver d(cfg());
  d.start_single(100);
  d.beat(120);
  d.notice(60s);
  SECTION("exit") {
    d.exit_rank(1, 0, 11);
    auto td = d.last<command::TearDown>();
    REQUIRE(td);
    CHECK_THAT(td->why, Catch::Contains("rank 1 killed by signal 11"));
  }
  SECTION("failed save") {
    auto at = d.last<command::CheckpointNow>()->at_step;
    d.feed(event::SaveFailed{d.epoch(), 0, at, "No space left on device", true});
    REQUIRE(d.last<command::TearDown>());
    d.confirm_teardown();
    CHECK_THAT(d.last<command::Finish>()->summary,
               Catch::Contains("FAILED: rank 0 could not save step"));
    CHECK_THAT(d.last<command::Finish>()->summary,
               Catch::Contains("resume will start from step 100"));
  }
  CHECK(d.timer_in(TimerId::kDeadline) == std::nullopt);
}

TEST_CASE("a heartbeat with step 2^64-1 cannot push at_step out of reach",
          "[machine][emergency][unit]") {
  MachineDriver d(cfg());
  d.start_single();
  d.beat(40);
  d.beat_rank(1, UINT64_MAX);
  CHECK(d.records("implausible_step").size() == 1);
  d.notice(30s);
  auto c = d.last<command::CheckpointNow>();
  REQUIRE(c);
  CHECK(c->at_step == 42);
}

TEST_CASE("an advisory asks for an extra checkpoint and the job goes on",
          "[machine][emergency][unit]") {
  MachineDriver d(cfg());
  d.start_single();
  d.beat(10);
  event::Notice n;
  n.action = NoticeAction::kCheckpoint;
  n.source = "aws";
  n.kind = "rebalance";
  n.deadline = d.now().wall + 120s;
  d.feed(n);
  auto c = d.last<command::CheckpointNow>();
  REQUIRE(c);
  CHECK(c->kind == CheckpointKind::kAdvisory);
  d.commit(c->at_step);
  CHECK(d.machine().phase() == Phase::kRunning);
  CHECK_FALSE(d.machine().finished());
}

TEST_CASE("repeated SIGTERM escalates: the second leaves the safety margin, the third stops now",
          "[machine][emergency][unit]") {
  MachineDriver d(cfg());
  d.start_single();
  d.beat(10);
  auto sigterm = [&] {
    event::Notice n;
    n.source = "signal";
    n.kind = "sigterm";
    n.deadline = d.now().wall + 30s;
    d.feed(n);
  };
  sigterm();
  CHECK(d.timer_in(TimerId::kDeadline) == Duration(28s));
  d.advance(200ms);
  sigterm();  // within 1 s: the same signal forwarded twice (srun and Slurm) counts once
  CHECK(d.timer_in(TimerId::kDeadline) == Duration(27800ms));
  d.advance(1s);
  sigterm();
  // Deadline now + 2 s margin: the ranks get until then (it is shorter than the margin).
  CHECK(d.timer_in(TimerId::kDeadline) == Duration(2s));
  CHECK(d.all_of<command::TearDown>().empty());
  d.advance(1s);
  sigterm();
  auto td = d.last<command::TearDown>();
  REQUIRE(td);
  CHECK_THAT(td->why, Catch::Contains("a third sigterm: stopping now"));
  d.confirm_teardown();
  CHECK(d.machine().exit_code() == kExitPreempted);
  CHECK_THAT(d.last<command::Finish>()->summary, Catch::Contains("stopped at once by a third sigterm"));
}
