#include "policies/restart_policy.h"

#include <catch2/catch.hpp>

using namespace std::chrono_literals;
using namespace shardguard::policies;
using shardguard::SteadyTime;

namespace {

const SteadyTime t0 = SteadyTime(1000h);

RestartPolicyOptions options() {
  RestartPolicyOptions o;
  o.crash = {2, 1h};
  o.hang = {1, 30min};
  o.infrastructure = {3, 1h};
  o.preempted = {5, 24h};
  o.no_progress_limit = 3;
  return o;
}

// An attempt that made progress: resumed from `step` and committed a newer one.
RestartDecision progressed(RestartPolicy& p, ExitClass c, SteadyTime now, uint64_t step) {
  return p.on_exit(c, now, step, step + 100);
}

}  // namespace

TEST_CASE("success never restarts") {
  RestartPolicy p(options());
  const RestartDecision d = p.on_exit(ExitClass::kSuccess, t0, 100, 200);
  CHECK_FALSE(d.restart);
  CHECK_FALSE(d.use_previous_checkpoint);
  CHECK(d.reason == "success");
  CHECK(p.restarts_in_window(ExitClass::kSuccess, t0) == 0);
}

TEST_CASE("each class has its own budget") {
  const auto [c, allowed] = GENERATE(table<ExitClass, uint32_t>({
      {ExitClass::kCrash, 2},
      {ExitClass::kHang, 1},
      {ExitClass::kInfrastructure, 3},
      {ExitClass::kPreempted, 5},
  }));
  RestartPolicy p(options());
  for (uint32_t i = 0; i < allowed; ++i) {
    const RestartDecision d = progressed(p, c, t0 + i * 1min, i * 100);
    CHECK(d.restart);
    CHECK_FALSE(d.use_previous_checkpoint);
  }
  CHECK(p.restarts_in_window(c, t0 + allowed * 1min) == allowed);
  const RestartDecision d = progressed(p, c, t0 + allowed * 1min, allowed * 100);
  CHECK_FALSE(d.restart);
  CHECK_THAT(d.reason,
             Catch::StartsWith(std::string(exit_class_name(c)) + ": restart budget exhausted"));
}

TEST_CASE("restart reasons count the budget") {
  RestartPolicy p(options());
  CHECK(progressed(p, ExitClass::kCrash, t0, 0).reason == "crash: restart 1 of 2 within 1h00m");
  CHECK(progressed(p, ExitClass::kCrash, t0, 100).reason == "crash: restart 2 of 2 within 1h00m");
  CHECK(progressed(p, ExitClass::kCrash, t0, 200).reason ==
        "crash: restart budget exhausted (2 within 1h00m)");
}

TEST_CASE("preemptions do not burn the crash budget") {
  RestartPolicy p(options());
  for (int i = 0; i < 5; ++i)
    CHECK(progressed(p, ExitClass::kPreempted, t0 + i * 1min, i * 100).restart);
  CHECK(p.restarts_in_window(ExitClass::kCrash, t0 + 5min) == 0);
  CHECK(progressed(p, ExitClass::kCrash, t0 + 6min, 600).restart);
  CHECK(progressed(p, ExitClass::kCrash, t0 + 7min, 700).restart);
  CHECK(p.restarts_in_window(ExitClass::kPreempted, t0 + 7min) == 5);
}

TEST_CASE("the budget window slides") {
  RestartPolicy p(options());  // crash: 2 per hour
  REQUIRE(progressed(p, ExitClass::kCrash, t0, 0).restart);
  REQUIRE(progressed(p, ExitClass::kCrash, t0 + 40min, 100).restart);

  SECTION("full until the oldest restart is a window old") {
    CHECK(p.restarts_in_window(ExitClass::kCrash, t0 + 59min) == 2);
    CHECK_FALSE(progressed(p, ExitClass::kCrash, t0 + 59min, 200).restart);
  }
  SECTION("one slot frees after the window") {
    CHECK(p.restarts_in_window(ExitClass::kCrash, t0 + 1h) == 1);
    CHECK(progressed(p, ExitClass::kCrash, t0 + 1h, 200).restart);
    CHECK_FALSE(progressed(p, ExitClass::kCrash, t0 + 1h + 1min, 300).restart);
  }
  SECTION("all slots free after both aged out") {
    CHECK(p.restarts_in_window(ExitClass::kCrash, t0 + 1h + 40min) == 0);
    CHECK(progressed(p, ExitClass::kCrash, t0 + 1h + 40min, 200).restart);
    CHECK(progressed(p, ExitClass::kCrash, t0 + 1h + 41min, 300).restart);
  }
}

TEST_CASE("a refused restart is not counted") {
  RestartPolicyOptions o = options();
  o.hang = {0, 1h};
  RestartPolicy p(o);
  CHECK_FALSE(progressed(p, ExitClass::kHang, t0, 0).restart);
  CHECK(p.restarts_in_window(ExitClass::kHang, t0) == 0);
}

TEST_CASE("no progress: previous checkpoint once, then give up naming the step") {
  RestartPolicyOptions o = options();
  o.crash = {100, 1h};
  RestartPolicy p(o);
  // Three attempts resume from step 500 and die before committing anything newer.
  CHECK(p.on_exit(ExitClass::kCrash, t0, 500, 500).restart);
  CHECK(p.on_exit(ExitClass::kCrash, t0 + 1min, 500, std::nullopt).restart);
  const RestartDecision third = p.on_exit(ExitClass::kHang, t0 + 2min, 500, 500);
  CHECK(third.restart);
  CHECK(third.use_previous_checkpoint);
  CHECK_THAT(third.reason, Catch::Contains("3 consecutive attempts resumed from step 500"));
  CHECK_THAT(third.reason, Catch::Contains("poison checkpoint or poison data?"));

  SECTION("the previous checkpoint fails too: give up") {
    const RestartDecision d = p.on_exit(ExitClass::kCrash, t0 + 3min, 400, 400);
    CHECK_FALSE(d.restart);
    CHECK_FALSE(d.use_previous_checkpoint);
    CHECK_THAT(d.reason, Catch::StartsWith("no_progress: 3 attempts resumed from step 500"));
    CHECK_THAT(d.reason, Catch::Contains("previous checkpoint (step 400) failed too"));
    CHECK_THAT(d.reason, Catch::EndsWith("poison data at step 500?"));
  }
  SECTION("a preemption on the previous checkpoint keeps it for the next attempt") {
    const RestartDecision d = p.on_exit(ExitClass::kPreempted, t0 + 3min, 400, std::nullopt);
    CHECK(d.restart);
    CHECK(d.use_previous_checkpoint);
    CHECK_FALSE(p.on_exit(ExitClass::kCrash, t0 + 4min, 400, 400).restart);
  }
  SECTION("progress from the previous checkpoint clears the suspicion") {
    const RestartDecision d = p.on_exit(ExitClass::kCrash, t0 + 3min, 400, 450);
    CHECK(d.restart);
    CHECK_FALSE(d.use_previous_checkpoint);
    SECTION("but step 500 gets no second fallback") {
      CHECK(p.on_exit(ExitClass::kCrash, t0 + 4min, 500, std::nullopt).restart);
      CHECK(p.on_exit(ExitClass::kCrash, t0 + 5min, 500, std::nullopt).restart);
      const RestartDecision last = p.on_exit(ExitClass::kCrash, t0 + 6min, 500, std::nullopt);
      CHECK_FALSE(last.restart);
      CHECK_THAT(last.reason, Catch::StartsWith("no_progress: 3 consecutive attempts"));
      CHECK_THAT(last.reason, Catch::Contains("already tried once"));
    }
  }
}

TEST_CASE("no progress streak needs consecutive failures from the same step") {
  RestartPolicyOptions o = options();
  o.crash = {100, 1h};
  RestartPolicy p(o);
  p.on_exit(ExitClass::kCrash, t0, 500, std::nullopt);
  p.on_exit(ExitClass::kCrash, t0 + 1min, 500, std::nullopt);
  SECTION("progress resets it") {
    p.on_exit(ExitClass::kCrash, t0 + 2min, 500, 600);
    CHECK_FALSE(p.on_exit(ExitClass::kCrash, t0 + 3min, 600, 600).use_previous_checkpoint);
    CHECK_FALSE(p.on_exit(ExitClass::kCrash, t0 + 4min, 600, 600).use_previous_checkpoint);
    CHECK(p.on_exit(ExitClass::kCrash, t0 + 5min, 600, 600).use_previous_checkpoint);
  }
  SECTION("preemptions and sick nodes neither count nor reset it") {
    CHECK_FALSE(p.on_exit(ExitClass::kPreempted, t0 + 2min, 500, 500).use_previous_checkpoint);
    CHECK_FALSE(p.on_exit(ExitClass::kInfrastructure, t0 + 3min, 500, std::nullopt)
                    .use_previous_checkpoint);
    CHECK(p.on_exit(ExitClass::kCrash, t0 + 4min, 500, std::nullopt).use_previous_checkpoint);
  }
  SECTION("a different resume step starts a new streak") {
    CHECK_FALSE(p.on_exit(ExitClass::kCrash, t0 + 2min, 400, 400).use_previous_checkpoint);
  }
}

TEST_CASE("no progress from a fresh start gives up without a fallback") {
  RestartPolicyOptions o = options();
  o.crash = {100, 1h};
  RestartPolicy p(o);
  CHECK(p.on_exit(ExitClass::kCrash, t0, std::nullopt, std::nullopt).restart);
  CHECK(p.on_exit(ExitClass::kCrash, t0 + 1min, std::nullopt, std::nullopt).restart);
  const RestartDecision d = p.on_exit(ExitClass::kCrash, t0 + 2min, std::nullopt, std::nullopt);
  CHECK_FALSE(d.restart);
  CHECK(d.reason ==
        "no_progress: 3 consecutive attempts from a fresh start failed before committing any "
        "checkpoint");
}

TEST_CASE("a fresh start that commits is progress") {
  RestartPolicyOptions o = options();
  o.crash = {100, 1h};
  o.no_progress_limit = 1;
  RestartPolicy p(o);
  CHECK(p.on_exit(ExitClass::kCrash, t0, std::nullopt, 0).restart);
  CHECK_FALSE(p.on_exit(ExitClass::kCrash, t0, std::nullopt, std::nullopt).restart);
}

TEST_CASE("no_progress_limit 0 turns the detector off") {
  RestartPolicyOptions o = options();
  o.crash = {100, 1h};
  o.no_progress_limit = 0;
  RestartPolicy p(o);
  for (int i = 0; i < 10; ++i) {
    const RestartDecision d = p.on_exit(ExitClass::kCrash, t0 + i * 1min, 500, std::nullopt);
    CHECK(d.restart);
    CHECK_FALSE(d.use_previous_checkpoint);
  }
}

TEST_CASE("an exhausted budget wins over a fallback") {
  RestartPolicyOptions o = options();  // crash: 2 per hour
  RestartPolicy p(o);
  CHECK(p.on_exit(ExitClass::kCrash, t0, 500, std::nullopt).restart);
  CHECK(p.on_exit(ExitClass::kCrash, t0 + 1min, 500, std::nullopt).restart);
  const RestartDecision d = p.on_exit(ExitClass::kCrash, t0 + 2min, 500, std::nullopt);
  CHECK_FALSE(d.restart);
  CHECK_THAT(d.reason, Catch::StartsWith("crash: restart budget exhausted"));
  CHECK_THAT(d.reason, Catch::Contains("resumed from step 500"));
}

TEST_CASE("no_space and resume_failed have budgets of their own; a resize needs none") {
  RestartPolicyOptions o{{1, std::chrono::hours(1)}, {1, std::chrono::hours(1)},
                         {1, std::chrono::hours(1)}, {1, std::chrono::hours(1)}, 0,
                         {2, std::chrono::hours(1)}, {1, std::chrono::hours(1)}};
  RestartPolicy p(o);
  const shardguard::SteadyTime t0{};
  CHECK(p.on_exit(ExitClass::kCrash, t0, 10, std::nullopt).restart);
  CHECK(p.on_exit(ExitClass::kNoSpace, t0, 10, std::nullopt).restart);
  CHECK(p.on_exit(ExitClass::kNoSpace, t0, 10, std::nullopt).restart);
  auto third = p.on_exit(ExitClass::kNoSpace, t0, 10, std::nullopt);
  CHECK_FALSE(third.restart);
  CHECK_THAT(third.reason, Catch::StartsWith("no_space: restart budget exhausted"));
  CHECK(p.on_exit(ExitClass::kResumeFailed, t0, 10, std::nullopt).restart);
  for (int i = 0; i < 5; ++i) CHECK(p.on_exit(ExitClass::kResize, t0, 10, 10).restart);
}
