// The decision core's divergence guard, in made-up time: a NaN loss on any rank rolls the run
// back past every checkpoint from the anomaly on (set aside), relaunches from the one before
// with SHARDGUARD_SKIP_BATCHES, rolls back further when it happens again, and gives up after
// [guard] rollbacks; progress past the anomaly starts the count again.
#include <catch2/catch.hpp>

#include <limits>

#include "core/exit_codes.h"
#include "tests/supervisor/machine_driver.h"

using namespace shardguard;
using namespace shardguard::testing;

namespace {

MachineConfig guarded(uint64_t skip_batches, uint32_t rollbacks = 2) {
  MachineConfig c;
  c.nproc_per_node = 2;
  c.backoff = {5s, 60s, 2.0, 0.0};
  c.hang_timeout = 30s;
  c.guard.skip_batches = skip_batches;
  c.guard.rollbacks = rollbacks;
  return c;
}

// Every rank reports a finite loss for steps from..to; `bad_rank` reports a NaN at `nan_step`.
void losses(MachineDriver& d, uint64_t from, uint64_t to, std::optional<uint32_t> bad_rank = {},
            uint64_t nan_step = 0) {
  event::Heartbeats h{d.epoch(), {}, std::nullopt};
  for (uint32_t r = 0; r < d.world(); ++r) {
    ScalarWindow w;
    for (uint64_t s = from; s <= to; ++s)
      w.add(s, bad_rank == r && s >= nan_step ? std::numeric_limits<double>::quiet_NaN() : 2.0);
    h.ranks.push_back({r, to, StepScalars{w, std::nullopt}});
  }
  d.feed(h);
}

}  // namespace

TEST_CASE("guard: a NaN loss sets aside the checkpoints from the state that produced it on and "
          "relaunches from the one before, skipping batches; progress past it clears the count",
          "[machine][unit]") {
  MachineDriver d(guarded(20));
  d.start_single();
  d.hello_all();
  losses(d, 1, 40);
  d.commit(20);
  d.commit(40);
  losses(d, 41, 52);
  losses(d, 53, 55, 1, 55);  // rank 1's window 53..55 holds the NaN
  auto div = d.records("divergence");
  REQUIRE(div.size() == 1);
  CHECK(MachineDriver::field(div[0], "rank") == "1");
  CHECK(MachineDriver::field(div[0], "step") == "53");
  CHECK(MachineDriver::field(div[0], "rule") == "nonfinite");
  CHECK(MachineDriver::field(div[0], "action") == "roll_back");
  CHECK(MachineDriver::field(div[0], "quarantine_from") == "54");
  // The loss of step 55 was computed on the state the checkpoint of step 54 would hold.
  auto qf = d.last<command::QuarantineFrom>();
  REQUIRE(qf);
  CHECK(qf->from_step == 54);
  REQUIRE(d.last<command::TearDown>());
  CHECK(d.all_of<command::CheckpointNow>().empty());  // bad weights are not worth saving

  // A save that was under way commits meanwhile: it is set aside too, not counted on.
  d.commit(60);
  auto q = d.last<command::Quarantine>();
  REQUIRE(q);
  CHECK(q->step == 60);

  d.confirm_teardown();
  CHECK(d.last_field("attempt_end", "class") == "divergence");
  CHECK(d.last_field("backoff", "seconds") == "0.000000");  // a decision, not a failure
  d.advance(1ms);
  auto fr = d.last<command::FindResume>();
  REQUIRE(fr);
  CHECK(fr->skip_from == std::optional<uint64_t>(54));
  d.resume(40);
  auto launch = d.last<command::Launch>();
  REQUIRE(launch);
  CHECK(launch->resume_step == std::optional<uint64_t>(40));
  CHECK(launch->skip_batches == 20);
  CHECK(d.last_field("guard_rollback", "to_step") == "40");
  d.launched();
  d.hello_all();

  // Past the anomaly with a checkpoint: the count starts again, no more skipping.
  losses(d, 41, 62);
  d.commit(60);
  CHECK(d.records("guard_recovered").size() == 1);
  d.exit_rank(0, 1);
  d.confirm_teardown();
  d.advance(10s);
  CHECK_FALSE(d.last<command::FindResume>()->skip_from);
  d.resume(60);
  CHECK(d.last<command::Launch>()->skip_batches == 0);
}

// Found by the run test: the NaN of a state saved at step 55 was first reported at step 56, the
// first step of a heartbeat window, and the checkpoint of step 55 was kept as "before" it.
TEST_CASE("guard: a NaN first seen at the start of a heartbeat window sets aside the checkpoint "
          "of the step before it, whose state produced it", "[machine][unit]") {
  MachineDriver d(guarded(5));
  d.start_single();
  losses(d, 1, 40);
  d.commit(40);
  losses(d, 41, 55);
  d.commit(55);
  losses(d, 56, 58, 1, 56);
  CHECK(d.last_field("divergence", "step") == "56");
  CHECK(d.last_field("divergence", "quarantine_from") == "55");
  CHECK(d.last<command::QuarantineFrom>()->from_step == 55);
  d.confirm_teardown();
  d.advance(1ms);
  CHECK(d.last<command::FindResume>()->skip_from == std::optional<uint64_t>(55));
}

TEST_CASE("guard: a crash after the rollback relaunches from the same checkpoint, still "
          "skipping", "[machine][unit]") {
  MachineDriver d(guarded(7));
  d.start_single();
  losses(d, 1, 40);
  d.commit(40);
  losses(d, 41, 45, 0, 45);
  d.confirm_teardown();
  d.advance(1ms);
  d.resume(40);
  CHECK(d.last<command::Launch>()->skip_batches == 7);
  d.launched();
  d.exit_rank(1, 3);  // an unrelated crash before any progress
  d.confirm_teardown();
  d.advance(10s);
  CHECK_FALSE(d.last<command::FindResume>()->skip_from);
  d.resume(40);
  CHECK(d.last<command::Launch>()->skip_batches == 7);
}

TEST_CASE("guard: the anomaly again after the rollback rolls back further, then gives up with "
          "the history (exit 76)", "[machine][unit]") {
  MachineDriver d(guarded(0));
  d.start_single();
  losses(d, 1, 40);
  d.commit(20);
  d.commit(40);
  losses(d, 41, 55, 0, 55);
  CHECK(d.last<command::QuarantineFrom>()->from_step == 54);
  d.confirm_teardown();
  d.advance(1ms);
  d.resume(40);
  d.launched();

  // Same bad batch, same NaN: this time the checkpoint of step 40 is suspect too.
  losses(d, 41, 55, 0, 55);
  CHECK(d.last_field("divergence", "action") == "roll_back_further");
  CHECK(d.last<command::QuarantineFrom>()->from_step == 40);
  d.confirm_teardown();
  d.advance(1ms);
  CHECK(d.last<command::FindResume>()->skip_from == std::optional<uint64_t>(40));
  d.resume(20);
  d.launched();

  losses(d, 21, 55, 0, 55);
  CHECK(d.last_field("divergence", "action") == "give_up");
  d.confirm_teardown();
  auto fin = d.last<command::Finish>();
  REQUIRE(fin);
  CHECK(fin->exit_code == kExitGaveUp);
  CHECK(fin->state == command::FinalState::kFailed);
  CHECK(fin->summary.find("3 anomalies, 2 rollback(s)") != std::string::npos);
  CHECK(d.last_field("give_up", "class") == "divergence");
  CHECK(d.all_of<command::QuarantineFrom>().size() == 3);  // the last checkpoints set aside too
}

TEST_CASE("guard: off, or a job that reports no scalars, changes nothing", "[machine][unit]") {
  MachineConfig c = guarded(5);
  c.guard.enabled = false;
  MachineDriver off(c);
  off.start_single();
  losses(off, 1, 10, 0, 5);
  CHECK(off.records("divergence").empty());
  CHECK_FALSE(off.last<command::TearDown>());

  MachineDriver quiet(guarded(5));
  quiet.start_single();
  quiet.beat(10);
  CHECK(quiet.records("divergence").empty());
  CHECK(quiet.last<command::Launch>()->skip_batches == 0);
}

TEST_CASE("guard: an anomaly during an emergency checkpoint still sets the steps aside; the "
          "run ends preempted", "[machine][unit]") {
  MachineDriver d(guarded(5));
  d.start_single();
  losses(d, 1, 40);
  d.commit(40);
  d.notice(60s);
  REQUIRE(d.last<command::CheckpointNow>());
  losses(d, 41, 44, 1, 44);
  CHECK(d.last<command::QuarantineFrom>()->from_step == 43);
  d.confirm_teardown();
  auto fin = d.last<command::Finish>();
  REQUIRE(fin);
  CHECK(fin->exit_code == kExitPreempted);
}
