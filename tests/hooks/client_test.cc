// hooks::Client against a real ControlServer: hello and heartbeats arrive, the agent's
// schedule and checkpoint_now are followed, an emergency save ends in should_exit(); and
// the checkpoint signal alone (no socket) asks for an emergency save of the step at hand.
#include "hooks/client.h"

#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <limits>
#include <thread>
#include <vector>

#include "checkpoint/reader.h"
#include "hooks/client_internal.h"
#include "tests/hooks/control_fixture.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::hooks;
using shardguard::testing::ControlFixture;
using shardguard::testing::TempDir;

namespace {

std::unique_ptr<Client> make_client(const std::string& ckpt_dir, const std::string& socket,
                                    uint32_t rank = 0, uint32_t world = 1) {
  ClientOptions o;
  o.job_id = "test-job";
  o.rank = rank;
  o.world_size = world;
  o.checkpoint_dir = ckpt_dir;
  o.control_socket = socket;
  o.under_shardguard = !socket.empty();
  auto c = Client::create(o);
  if (!c.ok()) FAIL(c.error().message());
  return std::move(c).value();
}

// Polls `pred` (client state changes on its reader thread) for up to 5 s.
template <typename Pred>
bool eventually(Pred pred) {
  for (auto until = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(2ms))
    if (pred()) return true;
  return false;
}

Status save_step(Client& c, uint64_t step) {
  static const std::vector<float> data = {1.5f, -2.0f, 3.25f};
  auto w = c.begin_save(step);
  SG_RETURN_IF_ERROR(
      w.add_tensor("w", checkpoint::DType::kF32, {3}, std::as_bytes(std::span(data))));
  w.set_rank_state({"rng", "{\"i\":1}", "null"});
  if (c.options().rank == 0) w.set_global_state({step, "null", "null"});
  return c.save(std::move(w));
}

}  // namespace

TEST_CASE("client: hello and heartbeats reach the agent", "[integration]") {
  ControlFixture f;
  TempDir ckpt;
  auto c = make_client(ckpt.path(), f.path());
  REQUIRE(f.wait([](const auto& r) { return r.hellos.size() == 1; }));
  auto hello = f.record().hellos[0];
  CHECK(hello.pid == ::getpid());
  CHECK(hello.rank == 0);
  c->heartbeat(5);
  REQUIRE(f.wait([](const auto& r) { return !r.heartbeats.empty(); }));
  CHECK(f.record().heartbeats.back() == std::pair<uint32_t, uint64_t>{0, 5});
}

TEST_CASE("client: reported scalars travel with the next heartbeat; a NaN goes out at once",
          "[integration]") {
  ControlFixture f;
  TempDir ckpt;
  auto c = make_client(ckpt.path(), f.path());
  REQUIRE(f.wait([](const auto& r) { return r.hellos.size() == 1; }));
  CHECK_FALSE(c->report_scalar("accuracy", 1, 0.5).ok());
  for (uint64_t step = 1; step <= 3; ++step) {
    REQUIRE(c->report_scalar("loss", step, 4.0 - double(step)).ok());
    REQUIRE(c->report_scalar("grad_norm", step, 0.25).ok());
  }
  c->heartbeat(3);  // the first heartbeat always goes out
  REQUIRE(f.wait([](const auto& r) { return r.scalars.size() == 1; }));
  auto first = f.record().scalars[0];
  REQUIRE(first.loss);
  CHECK(first.loss->first_step == 1);
  CHECK(first.loss->last_step == 3);
  CHECK(first.loss->count == 3);
  CHECK(first.loss->last == 1.0);
  CHECK(first.loss->max == 3.0);
  CHECK_FALSE(first.loss->nonfinite_step);
  REQUIRE(first.grad_norm);
  // Within 100 ms of the last heartbeat: a finite value waits, a NaN does not.
  REQUIRE(c->report_scalar("loss", 4, 0.5).ok());
  c->heartbeat(4);
  REQUIRE(c->report_scalar("loss", 5, std::numeric_limits<double>::quiet_NaN()).ok());
  c->heartbeat(5);
  REQUIRE(f.wait([](const auto& r) { return r.scalars.size() == 2; }));
  auto second = f.record().scalars[1];
  REQUIRE(second.loss);
  CHECK(second.loss->first_step == 4);
  CHECK(second.loss->last_step == 5);
  CHECK(second.loss->nonfinite_step == std::optional<uint64_t>(5));
  CHECK(second.loss->last == 0.5);
  CHECK_FALSE(second.grad_norm);
}

TEST_CASE("client: follows the agent's schedule", "[integration]") {
  ControlFixture f(Schedule{3, 0});
  TempDir ckpt;
  auto c = make_client(ckpt.path(), f.path());
  REQUIRE(eventually([&] { return c->should_checkpoint(3); }));  // once the schedule arrived
  CHECK_FALSE(c->should_checkpoint(4));
  CHECK(c->should_checkpoint(6));
  f.send_all(Schedule{0, 0});  // off
  REQUIRE(eventually([&] { return !c->should_checkpoint(9); }));
}

TEST_CASE("client: a periodic checkpoint_now asks for one save at that step", "[integration]") {
  ControlFixture f;
  TempDir ckpt;
  auto c = make_client(ckpt.path(), f.path());
  REQUIRE(f.wait([](const auto& r) { return r.hellos.size() == 1; }));
  CHECK_FALSE(c->should_checkpoint(2));
  f.send_all(CheckpointNow{0, RequestKind::kPeriodic, "periodic", 4});
  REQUIRE(eventually([&] { return c->requested_step() == 4u; }));
  CHECK_FALSE(c->should_checkpoint(3));
  CHECK(c->should_checkpoint(4));
  CHECK_FALSE(c->should_checkpoint(5));  // once only
  CHECK_FALSE(c->emergency().has_value());
}

TEST_CASE("client: checkpoint_now{at_step}, emergency save, then should_exit", "[integration]") {
  ControlFixture f;
  TempDir ckpt;
  auto c = make_client(ckpt.path(), f.path());
  REQUIRE(f.wait([](const auto& r) { return r.hellos.size() == 1; }));
  const int64_t deadline = to_unix_ms(RealClock::instance().wall_now() + 60s);
  f.send_all(CheckpointNow{deadline, RequestKind::kEmergency, "aws-spot-interruption", 7});
  REQUIRE(eventually([&] { return c->emergency().has_value(); }));
  CHECK(c->emergency()->reason == "aws-spot-interruption");
  CHECK(to_unix_ms(c->emergency()->deadline) == deadline);
  CHECK_FALSE(c->should_checkpoint(6));
  REQUIRE(c->should_checkpoint(7));
  CHECK_FALSE(c->should_exit());
  auto st = save_step(*c, 7);
  if (!st.ok()) FAIL(st.error().message());
  CHECK(c->should_exit());
  CHECK(c->last_committed_step() == 7);
  CHECK_FALSE(c->should_checkpoint(8));  // nothing more after the emergency save
  REQUIRE(f.wait([](const auto& r) { return r.committed.size() == 1; }));
  auto r = f.record();
  CHECK(r.begins == std::vector<std::pair<uint32_t, uint64_t>>{{0, 7}});
  CHECK(r.committed == std::vector<std::pair<uint32_t, uint64_t>>{{0, 7}});
  auto reader =
      checkpoint::CheckpointReader::open(PosixFilesystem::instance(), ckpt / "step-000000007");
  REQUIRE(reader.ok());
  CHECK(reader->manifest().reason == checkpoint::SaveReason::kEmergency);
}

TEST_CASE("client: a request for a step this rank already passed is reported, never saved alone",
          "[integration]") {
  ControlFixture f;
  TempDir ckpt;
  auto c = make_client(ckpt.path(), f.path());
  REQUIRE(f.wait([](const auto& r) { return r.hellos.size() == 1; }));
  CHECK_FALSE(c->should_checkpoint(9));
  CHECK_FALSE(c->should_checkpoint(10));
  const int64_t deadline = to_unix_ms(RealClock::instance().wall_now() + 60s);
  f.send_all(CheckpointNow{deadline, RequestKind::kEmergency, "sigterm", 10});
  REQUIRE(f.wait([](const auto& r) { return r.passed.size() == 1; }));
  CHECK(f.record().passed[0] == std::pair<uint32_t, uint64_t>{0, 10});
  CHECK_FALSE(c->should_checkpoint(11));  // the step is the supervisor's to choose
  CHECK_FALSE(c->should_checkpoint(12));
  f.send_all(CheckpointNow{deadline, RequestKind::kEmergency, "sigterm", 14});
  REQUIRE(eventually([&] { return c->requested_step() == 14u; }));
  CHECK_FALSE(c->should_checkpoint(13));
  CHECK(c->should_checkpoint(14));
  CHECK(f.record().passed.size() == 1);
}

TEST_CASE("client: an emergency save waiting for other ranks gives way to a later at_step",
          "[integration]") {
  ControlFixture f;
  TempDir ckpt;
  auto c = make_client(ckpt.path(), f.path(), /*rank=*/1, /*world=*/2);
  REQUIRE(f.wait([](const auto& r) { return r.hellos.size() == 1; }));
  const int64_t deadline = to_unix_ms(RealClock::instance().wall_now() + 60s);
  f.send_all(CheckpointNow{deadline, RequestKind::kEmergency, "sigterm", 5});
  REQUIRE(eventually([&] { return c->requested_step() == 5u; }));
  REQUIRE(c->should_checkpoint(5));
  // Rank 0 never saves step 5: the supervisor moves every rank to step 8.
  std::thread later([&] {
    std::this_thread::sleep_for(300ms);
    f.send_all(CheckpointNow{deadline, RequestKind::kEmergency, "sigterm", 8});
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto st = save_step(*c, 5);
  later.join();
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code() == ErrorCode::kCancelled);
  CHECK_THAT(st.error().message(), Catch::Contains("every rank now saves step 8"));
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  CHECK_FALSE(c->should_exit());
  CHECK(c->should_checkpoint(8));
}

TEST_CASE("client: abort_save ends the wait for a commit that will not happen", "[integration]") {
  ControlFixture f;
  TempDir ckpt;
  auto c = make_client(ckpt.path(), f.path(), /*rank=*/1, /*world=*/2);
  REQUIRE(f.wait([](const auto& r) { return r.hellos.size() == 1; }));
  const int64_t deadline = to_unix_ms(RealClock::instance().wall_now() + 60s);
  f.send_all(CheckpointNow{deadline, RequestKind::kEmergency, "sigterm", 3});
  REQUIRE(eventually([&] { return c->requested_step() == 3u; }));
  REQUIRE(c->should_checkpoint(3));
  std::thread later([&] {
    std::this_thread::sleep_for(300ms);
    f.send_all(AbortSave{3, "rank 0: No space left on device"});
  });
  auto st = save_step(*c, 3);
  later.join();
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code() == ErrorCode::kCancelled);
}

TEST_CASE("client: stop from the agent means exit", "[integration]") {
  ControlFixture f;
  TempDir ckpt;
  auto c = make_client(ckpt.path(), f.path());
  REQUIRE(f.wait([](const auto& r) { return r.hellos.size() == 1; }));
  f.send_all(Stop{0});
  CHECK(eventually([&] { return c->should_exit(); }));
}

TEST_CASE("client: a failed save is reported as checkpoint_failed", "[integration]") {
  ControlFixture f;
  TempDir ckpt;
  auto c = make_client(ckpt.path(), f.path());
  auto w = c->begin_save(3);  // rank 0 without the global state: finish() refuses
  CHECK_FALSE(c->save(std::move(w)).ok());
  REQUIRE(f.wait([](const auto& r) { return r.failed.size() == 1; }));
  CHECK_THAT(f.record().failed[0].second, Catch::Contains("global state"));
}

TEST_CASE("client: SIGUSR1 alone (no socket) asks for an emergency save at the current step",
          "[integration]") {
  TempDir ckpt;
  auto c = make_client(ckpt.path(), "");
  CHECK_FALSE(c->should_checkpoint(11));
  REQUIRE(::raise(SIGUSR1) == 0);  // the handler only sets a flag
  REQUIRE(c->should_checkpoint(12));
  REQUIRE(c->emergency().has_value());
  CHECK(c->emergency()->at_step == 12);
  CHECK(c->emergency()->reason == "signal");
  CHECK_FALSE(c->should_exit());
  auto st = save_step(*c, 12);
  if (!st.ok()) FAIL(st.error().message());
  CHECK(c->should_exit());
}

TEST_CASE("client: the job's [checkpoint] commit_timeout reaches the client through its "
          "environment",
          "[integration]") {
  // What shardguard run sets for each rank (supervisor/rank_env.cc).
  TempDir dir;
  ::setenv("SHARDGUARD_CHECKPOINT_DIR", dir.path().c_str(), 1);
  ::setenv("SHARDGUARD_COMMIT_TIMEOUT_MS", "7000", 1);
  auto o = options_from_env(ClientOptions{});
  REQUIRE(o.ok());
  CHECK(o->commit_timeout == std::chrono::milliseconds(7000));
  ::setenv("SHARDGUARD_COMMIT_TIMEOUT_MS", "0", 1);
  auto zero = options_from_env(ClientOptions{});
  REQUIRE_FALSE(zero.ok());
  CHECK_THAT(zero.error().message(), Catch::Contains("SHARDGUARD_COMMIT_TIMEOUT_MS"));
  ::unsetenv("SHARDGUARD_COMMIT_TIMEOUT_MS");
  auto unset = options_from_env(ClientOptions{});
  REQUIRE(unset.ok());
  CHECK(unset->commit_timeout == std::chrono::minutes(10));  // the client's own default
  ::unsetenv("SHARDGUARD_CHECKPOINT_DIR");
}

TEST_CASE("client: the attempt is the supervisor's, else the launcher's restart count; a job "
          "started by hand has no numbered attempts",
          "[integration]") {
  TempDir dir;
  ::setenv("SHARDGUARD_CHECKPOINT_DIR", dir.path().c_str(), 1);
  for (const char* name : {"SHARDGUARD_ATTEMPT", "TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"})
    ::unsetenv(name);
  auto by_hand = options_from_env(ClientOptions{});
  REQUIRE(by_hand.ok());
  CHECK(by_hand->attempt == 0);
  CHECK_FALSE(by_hand->attempts_numbered);
  ::setenv("SLURM_RESTART_COUNT", "2", 1);
  auto slurm = options_from_env(ClientOptions{});
  REQUIRE(slurm.ok());
  CHECK(slurm->attempt == 2);
  CHECK(slurm->attempts_numbered);
  ::setenv("TORCHELASTIC_RESTART_COUNT", "3", 1);
  CHECK(options_from_env(ClientOptions{})->attempt == 3);
  ::setenv("SHARDGUARD_ATTEMPT", "9", 1);
  CHECK(options_from_env(ClientOptions{})->attempt == 9);
  ::setenv("TORCHELASTIC_RESTART_COUNT", "x", 1);
  CHECK(options_from_env(ClientOptions{})->attempt == 9);  // ours win; theirs is not read
  ::unsetenv("SHARDGUARD_ATTEMPT");
  auto bad = options_from_env(ClientOptions{});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message(), Catch::Contains("TORCHELASTIC_RESTART_COUNT='x'"));
  for (const char* name : {"TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT", "SHARDGUARD_CHECKPOINT_DIR"})
    ::unsetenv(name);
}
