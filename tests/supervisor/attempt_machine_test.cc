// The decision core on one node, in made-up time: exit classes, restart budgets, backoff,
// hangs, no progress, launch failures, and stale events.
#include <catch2/catch.hpp>

#include "core/exit_codes.h"
#include "supervisor/machine_metrics.h"
#include "tests/supervisor/machine_driver.h"

using namespace shardguard;
using namespace shardguard::testing;

namespace {

MachineConfig two_ranks() {
  MachineConfig c;
  c.nproc_per_node = 2;
  c.backoff = {1s, 60s, 2.0, 0.0};
  c.hang_timeout = 30s;
  return c;
}

}  // namespace

TEST_CASE("a fresh start launches every rank of the node with the resume checkpoint",
          "[machine][unit]") {
  MachineDriver d(two_ranks());
  d.start(7);
  CHECK(d.all_of<command::FindResume>().empty());  // no node yet
  d.feed(event::NodeJoined{0, "10.0.0.1"});
  auto fr = d.last<command::FindResume>();
  REQUIRE(fr);
  CHECK(fr->epoch == 7);
  d.resume(400);
  auto l = d.last<command::Launch>();
  REQUIRE(l);
  CHECK(l->epoch == 7);
  CHECK(l->world_size == 2);
  CHECK(l->resume_step == 400u);
  CHECK(l->master_addr == "10.0.0.1");
  REQUIRE(l->nodes.size() == 1);
  CHECK(l->nodes[0].first_rank == 0);
  CHECK(l->nodes[0].nproc == 2);
  CHECK(d.machine().phase() == Phase::kLaunching);
  d.launched();
  CHECK(d.machine().phase() == Phase::kRunning);
  CHECK(d.last_field("launch", "resume_step") == "400");
}

TEST_CASE("every rank exiting 0 is success; the job ends with 0", "[machine][unit]") {
  MachineDriver d(two_ranks());
  d.start_single();
  d.hello_all();
  d.beat(10);
  d.exit_rank(0, 0);
  CHECK(d.all_of<command::TearDown>().empty());
  d.exit_rank(1, 0);
  REQUIRE(d.last<command::TearDown>());
  d.confirm_teardown();
  REQUIRE(d.machine().finished());
  CHECK(d.machine().exit_code() == 0);
  CHECK(d.last_field("attempt_end", "class") == "success");
  CHECK(d.last<command::Finish>()->state == command::FinalState::kSucceeded);
}

TEST_CASE("a crash tears every rank down and relaunches after the backoff", "[machine][unit]") {
  MachineDriver d(two_ranks());
  d.start_single(100);
  d.beat(150);
  d.commit(200);
  d.beat(230);
  d.exit_rank(1, 0, 9);  // SIGKILL
  auto td = d.last<command::TearDown>();
  REQUIRE(td);
  CHECK_THAT(td->why, Catch::Contains("rank 1 killed by signal 9"));
  d.confirm_teardown();
  CHECK(d.last_field("attempt_end", "class") == "crash");
  CHECK(d.last_field("attempt_end", "lost_steps") == "30");  // 230 - 200, not from 0
  CHECK(d.machine().phase() == Phase::kBackoff);
  REQUIRE(d.timer_in(TimerId::kBackoff) == Duration(1s));
  const size_t finds = d.all_of<command::FindResume>().size();
  d.advance(999ms);
  CHECK(d.all_of<command::FindResume>().size() == finds);
  d.advance(1ms);
  auto fr = d.last<command::FindResume>();
  REQUIRE(d.all_of<command::FindResume>().size() == finds + 1);
  CHECK(fr->epoch == 1);
  d.resume(200);
  auto l = d.last<command::Launch>();
  CHECK(l->epoch == 1);
  CHECK(l->master_port != d.all_of<command::Launch>().front().master_port);  // fresh per epoch
}

TEST_CASE("exit classes", "[machine][unit]") {
  MachineDriver d(two_ranks());
  d.start_single(100);
  d.beat(120);
  SECTION("an exit code listed as preemption is preempted") {
    d.exit_rank(0, 75);
    d.exit_rank(1, 75);
    d.confirm_teardown();
    CHECK(d.last_field("attempt_end", "class") == "preempted");
  }
  SECTION("a non-zero exit is a crash") {
    d.exit_rank(0, 3);
    d.confirm_teardown();
    CHECK(d.last_field("attempt_end", "class") == "crash");
    CHECK_THAT(d.last_field("attempt_end", "detail"), Catch::Contains("rank 0 exited with code 3"));
  }
  SECTION("a failed save for lack of space, then a crash, is no_space") {
    d.feed(event::SaveFailed{d.epoch(), 1, 150, "write: No space left on device", true});
    d.exit_rank(1, 1);
    d.confirm_teardown();
    CHECK(d.last_field("attempt_end", "class") == "no_space");
  }
  SECTION("a corrupt resume checkpoint is quarantined and is not a crash") {
    d.feed(event::ResumeFailed{d.epoch(), 1, "ckpt/step-100/manifest.json",
                               "shard-00001-of-00002.safetensors", 4194304, "block fails"});
    auto q = d.last<command::Quarantine>();
    REQUIRE(q);
    CHECK(q->step == 100);
    REQUIRE(d.last<command::TearDown>());
    d.exit_rank(1, kJobExitResumeFailed, 0, true);
    d.confirm_teardown();
    CHECK(d.last_field("attempt_end", "class") == "resume_failed");
    CHECK(d.machine().phase() == Phase::kBackoff);
    CHECK(d.machine().stats(d.now()).restarts.at("resume_failed") == 1);
  }
  SECTION("a node health failure is infrastructure, with an emergency checkpoint first") {
    d.feed(event::NodeUnhealthy{0, "gpu: XID 79", d.now().wall + 30s});
    auto c = d.last<command::CheckpointNow>();
    REQUIRE(c);
    CHECK(c->kind == CheckpointKind::kEmergency);
    d.commit(c->at_step);
    d.exit_rank(0, 75);
    d.exit_rank(1, 75);
    d.confirm_teardown();
    CHECK(d.last_field("attempt_end", "class") == "infrastructure");
    CHECK(d.machine().exit_code() == kExitPreempted);
  }
}

TEST_CASE("the crash budget runs out: give up with 76; preemptions do not burn it",
          "[machine][unit]") {
  MachineConfig c = two_ranks();
  c.restart.crash = {2, std::chrono::hours(1)};
  c.restart.no_progress_limit = 0;
  MachineDriver d(c);
  d.start_single(100);
  auto crash_once = [&](uint64_t committed) {
    d.beat(committed + 1);
    d.commit(committed);  // progress, so no-progress does not interfere
    d.exit_rank(0, 1);
    d.confirm_teardown();
  };
  crash_once(110);
  d.advance(2s);
  d.resume(110);
  d.launched();
  // A preemption exit (code 75 without a notice) in between: its own budget.
  d.beat(111);
  d.exit_rank(0, 75);
  d.exit_rank(1, 75);
  d.confirm_teardown();
  CHECK(d.last_field("attempt_end", "class") == "preempted");
  d.advance(10s);
  d.resume(110);
  d.launched();
  crash_once(120);
  d.advance(10s);
  d.resume(120);
  d.launched();
  crash_once(130);
  REQUIRE(d.machine().finished());
  CHECK(d.machine().exit_code() == kExitGaveUp);
  CHECK_THAT(d.last_field("give_up", "why"), Catch::Contains("crash: restart budget exhausted"));
  REQUIRE(d.last<command::Hook>());
  CHECK(d.last<command::Hook>()->event == "give_up");
}

TEST_CASE("backoff grows, and resets after a healthy run", "[machine][unit]") {
  MachineConfig c = two_ranks();
  c.restart.crash = {10, std::chrono::hours(1)};
  c.restart.no_progress_limit = 0;
  c.healthy_after = 60s;
  MachineDriver d(c);
  d.start_single();
  std::vector<Duration> delays;
  for (int i = 0; i < 3; ++i) {
    d.exit_rank(0, 1);
    d.confirm_teardown();
    delays.push_back(*d.timer_in(TimerId::kBackoff));
    d.advance(*d.timer_in(TimerId::kBackoff));
    d.resume(std::nullopt);
    d.launched();
  }
  CHECK(delays == std::vector<Duration>{1s, 2s, 4s});
  d.advance(61s);  // a healthy run
  d.exit_rank(0, 1);
  d.confirm_teardown();
  CHECK(d.timer_in(TimerId::kBackoff) == Duration(1s));
}

TEST_CASE("hang: no heartbeat for hang_timeout tears down with a report", "[machine][unit]") {
  MachineDriver d(two_ranks());
  d.start_single();
  d.beat(5);
  d.advance(20s);
  d.beat_rank(0, 6);  // rank 1 stays silent
  d.advance(9s);
  CHECK(d.all_of<command::TearDown>().empty());
  d.advance(1s);  // rank 1: 30 s without a heartbeat
  auto td = d.last<command::TearDown>();
  REQUIRE(td);
  CHECK(td->why == "rank 1 hung");
  auto rep = d.last<command::CollectHangReport>();
  REQUIRE(rep);
  CHECK(rep->rank == 1);
  d.confirm_teardown();
  CHECK(d.last_field("attempt_end", "class") == "hang");
}

TEST_CASE("hang: a save in progress gets the commit timeout on top", "[machine][unit]") {
  MachineConfig c = two_ranks();
  c.commit_timeout = 60s;
  MachineDriver d(c);
  d.start_single();
  d.beat(5);
  d.feed(event::SaveBegan{d.epoch(), 0, 5});
  d.feed(event::SaveBegan{d.epoch(), 1, 5});
  d.advance(80s);
  CHECK(d.all_of<command::TearDown>().empty());
  d.advance(10s);
  REQUIRE(d.last<command::TearDown>());
}

TEST_CASE("startup_timeout: a rank that never heartbeats is a hang", "[machine][unit]") {
  MachineConfig c = two_ranks();
  c.startup_timeout = 45s;
  MachineDriver d(c);
  d.start_single();
  d.beat_rank(0, 1);
  d.advance(44s);
  d.beat_rank(0, 2);
  CHECK(d.all_of<command::TearDown>().empty());
  d.advance(1s);
  auto td = d.last<command::TearDown>();
  REQUIRE(td);
  CHECK_THAT(td->why, Catch::Contains("rank 1 sent no heartbeat within startup_timeout"));
}

TEST_CASE("no progress: the same step fails K times, then the previous checkpoint, then give up",
          "[machine][unit]") {
  MachineConfig c = two_ranks();
  c.restart.crash = {100, std::chrono::hours(1)};
  c.restart.no_progress_limit = 3;
  MachineDriver d(c);
  d.start_single(500);
  auto fail = [&] {
    d.beat(510);
    d.exit_rank(0, 1);
    d.confirm_teardown();
    if (!d.machine().finished()) d.advance(*d.timer_in(TimerId::kBackoff));
  };
  fail();
  d.resume(500);
  d.launched();
  fail();
  d.resume(500);
  d.launched();
  fail();  // third failure from 500: the next attempt skips it
  auto fr = d.last<command::FindResume>();
  REQUIRE(fr);
  CHECK(fr->skip_steps == std::vector<uint64_t>{500});
  // The suspect checkpoint is set aside with the diagnosis.
  auto q = d.last<command::Quarantine>();
  REQUIRE(q);
  CHECK(q->step == 500);
  CHECK_THAT(q->reason, Catch::Contains("loop breaker: ") && Catch::Contains("step 500"));
  d.resume(400);
  d.launched();
  fail();  // the previous checkpoint failed too
  REQUIRE(d.machine().finished());
  CHECK(d.machine().exit_code() == kExitGaveUp);
  CHECK_THAT(d.last_field("give_up", "why"), Catch::Contains("no_progress"));
}

TEST_CASE("a command that cannot start ends the job with 1; a transient failure retries",
          "[machine][unit]") {
  MachineDriver d(two_ranks());
  d.start(0);
  d.feed(event::NodeJoined{0, ""});
  d.resume(std::nullopt);
  SECTION("permanent") {
    d.feed(event::LaunchFailed{d.epoch(), 0, "launch 'nosuchprog': No such file or directory", false});
    d.confirm_teardown();
    REQUIRE(d.machine().finished());
    CHECK(d.machine().exit_code() == kExitFailure);
    CHECK_THAT(d.last<command::Finish>()->summary, Catch::Contains("nosuchprog"));
  }
  SECTION("transient (too many open files)") {
    d.feed(event::LaunchFailed{d.epoch(), 0, "pipe: Too many open files", true});
    d.confirm_teardown();
    CHECK_FALSE(d.machine().finished());
    CHECK(d.machine().phase() == Phase::kBackoff);
  }
}

TEST_CASE("events of an older epoch move nothing", "[machine][unit]") {
  MachineDriver d(two_ranks());
  d.start_single(100);
  d.exit_rank(0, 1);
  d.confirm_teardown();
  d.advance(*d.timer_in(TimerId::kBackoff));
  d.resume(100);
  d.launched();
  const size_t before = d.all().size();
  d.feed(event::RankExited{0, 1, true, 0, 9, false, "killed by signal 9"});
  d.feed(event::Heartbeats{0, {{0, 999999, {}}}, std::nullopt});
  d.feed(event::RankHello{0, 0, 42});
  CHECK(d.all().size() == before);
  CHECK(d.machine().phase() == Phase::kRunning);
}

TEST_CASE("time-based checkpoints request a save of every rank at one step", "[machine][unit]") {
  MachineConfig c = two_ranks();
  c.interval_mode = IntervalMode::kTime;
  c.every = 60s;
  c.hang_timeout = 10min;
  MachineDriver d(c);
  d.start_single();
  d.beat(10);
  d.advance(60s);
  auto cn = d.last<command::CheckpointNow>();
  REQUIRE(cn);
  CHECK(cn->kind == CheckpointKind::kPeriodic);
  CHECK(cn->at_step >= 12);
  CHECK(d.timer_in(TimerId::kPeriodic) == Duration(60s));
}

TEST_CASE("a failed save makes every rank give up waiting for that commit", "[machine][unit]") {
  MachineDriver d(two_ranks());
  d.start_single();
  d.beat(50);
  d.feed(event::SaveFailed{d.epoch(), 1, 50, "fsync: Input/output error", false});
  auto a = d.last<command::AbortSave>();
  REQUIRE(a);
  CHECK(a->step == 50);
  CHECK_THAT(a->why, Catch::Contains("rank 1"));
  CHECK(d.machine().phase() == Phase::kRunning);
}

TEST_CASE("save window: a save longer than half the shortest notice is recorded once, with "
          "the window's source",
          "[machine][unit]") {
  MachineConfig c = two_ranks();
  c.save_window.stop_grace = 30s;
  c.save_window.clouds = {policies::Cloud::kAws};  // 120 s: the grace is shorter
  c.hang_timeout = std::chrono::hours(1);          // long saves, no heartbeats between
  MachineDriver d(c);
  d.start_single();
  d.beat(5);
  auto save = [&](uint64_t step, Duration took) {
    d.feed(event::SaveBegan{d.epoch(), 0, step});
    d.advance(took);
    d.commit(step);
  };
  save(5, 10s);  // a third of the window: fine
  CHECK(d.records("save_window").empty());
  save(6, 20s);  // two thirds: warned
  REQUIRE(d.records("save_window").size() == 1);
  CHECK(d.last_field("save_window", "source") == "[stop] grace");
  CHECK_THAT(d.last_field("save_window", "warning"), Catch::Contains("raise [stop] grace"));
  save(7, 21s);  // about as slow: not again
  CHECK(d.records("save_window").size() == 1);
  save(8, 28s);  // a quarter slower than the warned one: again
  CHECK(d.records("save_window").size() == 2);
}

TEST_CASE("save window at start: an earlier run's save over half the Slurm --signal lead "
          "warns before the first launch; the metrics show window and fraction",
          "[machine][unit]") {
  MachineConfig c = two_ranks();
  c.save_window.stop_grace = 30s;
  c.save_window.slurm_signal_lead = 12s;  // SBATCH_SIGNAL=B:USR1@12
  c.hang_timeout = std::chrono::hours(1);
  MachineDriver d(c);
  d.machine().seed_save_time(7s);
  d.start();
  REQUIRE(d.records("save_window").size() == 1);  // at start: no launch yet
  CHECK_FALSE(d.last<command::Launch>());
  CHECK(d.last_field("save_window", "when") == "start");
  CHECK(d.last_field("save_window", "source") == "Slurm --signal lead");
  CHECK_THAT(d.last_field("save_window", "warning"),
             Catch::Contains("58%") && Catch::Contains("sbatch --signal") &&
                 Catch::Contains("earlier run"));
  std::string metrics = machine_metrics(d.machine().stats(d.now()));
  CHECK_THAT(metrics, Catch::Contains("shardguard_save_window_seconds 12.0"));
  CHECK_THAT(metrics, Catch::Contains("shardguard_save_window_fraction 0.58"));

  // This run's own saves take over: a faster one lowers the fraction without a warning.
  d.feed(event::NodeJoined{0, "10.0.0.1"});
  d.resume(std::nullopt);
  d.launched();
  d.beat(5);
  d.feed(event::SaveBegan{d.epoch(), 0, 5});
  d.advance(3s);
  d.commit(5);
  CHECK(d.records("save_window").size() == 1);
  CHECK_THAT(machine_metrics(d.machine().stats(d.now())),
             Catch::Contains("shardguard_save_window_fraction 0.25"));
}

TEST_CASE("save window at start: nothing without an earlier save, or with one that fits",
          "[machine][unit]") {
  MachineConfig c = two_ranks();
  c.save_window.stop_grace = 30s;
  MachineDriver fits(c);
  fits.machine().seed_save_time(15s);  // exactly half: fits
  fits.start();
  CHECK(fits.records("save_window").empty());
  MachineDriver unknown(c);
  unknown.start();
  CHECK(unknown.records("save_window").empty());
  CHECK_THAT(machine_metrics(unknown.machine().stats(unknown.now())),
             Catch::Contains("shardguard_save_window_fraction 0.0"));
}

TEST_CASE("lost steps and the last committed step count from the resume step, not from 0",
          "[machine][unit]") {
  MachineDriver d(two_ranks());
  d.start_single(500);  // resumes from step 500
  auto stats = d.machine().stats(d.now());
  CHECK(stats.any_committed);
  CHECK(stats.last_committed_step == 500);
  d.beat(510);
  d.exit_rank(0, 1);
  d.confirm_teardown();
  CHECK(d.last_field("attempt_end", "lost_steps") == "10");
  CHECK(d.last_field("attempt_end", "resume_step") == "500");
  stats = d.machine().stats(d.now());
  CHECK(stats.lost_steps == 10);
  CHECK(stats.last_committed_step == 500);
}
