// One job per checkpoint directory, with real `shardguard run` processes: a second supervisor
// on the same directory is refused naming the first (exit 78); a run with another job id is
// refused naming both unless it takes over on purpose; the directory's job id is adopted by a
// run that names none; runs that keep ending preempted without committing stop being
// requeueable (exit 78).
#include <catch2/catch.hpp>

#include <fstream>
#include <thread>

#include "core/exit_codes.h"
#include "tests/run/run_fixture.h"
#include "tests/support/loop_fs.h"

using namespace shardguard;
using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

const std::vector<std::string> kSlowTrain = {"--steps", "100000", "--rows", "16", "--log-every",
                                             "0", "--sleep-ms", "5"};

std::vector<std::string> with_flags(std::vector<std::string> argv, std::vector<std::string> flags) {
  // Flags go right after `run`, before `--config`.
  argv.insert(argv.begin() + 2, flags.begin(), flags.end());
  return argv;
}

}  // namespace

TEST_CASE("a second supervisor on the same checkpoint directory is refused, naming the first",
          "[run][integration]") {
  RunDirs a;
  write_config(a);
  Background first(run_argv(a, 1, kSlowTrain), a.log());
  REQUIRE(eventually([&] { return !events_named(a, "hello").empty(); }, 20s));
  // Another run dir, same checkpoint dir, same (default) job: refused while the first lives.
  RunDirs b;
  std::ofstream(b.config()) << "[job]\ncheckpoint_dir = \"" << a.ckpt() << "\"\nrun_dir = \""
                            << b.run() << "\"\n";
  Background second(run_argv(b, 1, kSlowTrain), b.log());
  auto code = second.wait(20s);
  INFO(slurp(b.log()));
  REQUIRE(code == kExitConfig);
  CHECK_THAT(slurp(b.log()), Catch::Contains("is in use"));
  CHECK_THAT(slurp(b.log()), Catch::Contains("pid " + std::to_string(first.pid())));
  CHECK(events_named(b, "launch").empty());
  // Once the first is gone (killed outright, even), the directory is free again.
  first.signal(SIGKILL);
  REQUIRE(first.wait(10s).has_value());
  Background third(run_argv(b, 1, {"--steps", "40", "--rows", "16", "--log-every", "0"}), b.log());
  CHECK(third.wait(60s) == 0);
}

// Issue 26, item 2: the twin's leftover sweep SIGKILLed the live job's ranks ("killed 4
// leftover process(es) of an earlier run"), then it failed on the control socket (exit 1).
TEST_CASE("a second supervisor on the same run directory is refused, and the live job goes on",
          "[run][integration]") {
  RunDirs a;
  write_config(a);
  Background first(run_argv(a, 2, kSlowTrain), a.log());
  REQUIRE(eventually([&] { return events_named(a, "hello").size() >= 2; }, 20s));
  // Same run dir, another checkpoint dir: only the run directory is shared.
  RunDirs b;
  std::ofstream(b.config()) << "[job]\ncheckpoint_dir = \"" << b.ckpt() << "\"\nrun_dir = \""
                            << a.run() << "\"\n";
  Background second(run_argv(b, 1, kSlowTrain), b.log());
  auto code = second.wait(20s);
  INFO(slurp(b.log()));
  REQUIRE(code == kExitConfig);
  CHECK_THAT(slurp(b.log()), Catch::Contains("run directory '" + a.run() + "' is in use") &&
                                 Catch::Contains("pid " + std::to_string(first.pid())) &&
                                 !Catch::Contains("leftover"));
  // The live job lost nothing: no rank ended, no second start in its event log.
  std::this_thread::sleep_for(1s);
  CHECK(events_named(a, "rank_exit").empty());
  CHECK(events_named(a, "attempt_end").empty());
  CHECK(events_named(a, "start").size() == 1);
  CHECK_FALSE(first.wait(0ms).has_value());  // still running
  first.signal(SIGTERM);
  CHECK(first.wait(30s).has_value());
}

TEST_CASE("the directory remembers its job: another id is refused, adopted or taken over",
          "[run][integration]") {
  RunDirs d;
  write_config(d);
  const auto short_train = std::vector<std::string>{"--steps", "60", "--rows", "16", "--log-every", "0"};
  {
    Background run(with_flags(run_argv(d, 1, short_train), {"--job-id", "llama-7b"}), d.log());
    REQUIRE(run.wait(60s) == 0);
  }
  CHECK(field(events_named(d, "start").back(), "job_id") == "llama-7b");
  SECTION("no id given: the directory's is adopted") {
    Background run(run_argv(d, 1, short_train), d.log());
    REQUIRE(run.wait(60s) == 0);
    CHECK(field(events_named(d, "start").back(), "job_id") == "llama-7b");
  }
  SECTION("another id: refused naming both") {
    Background run(with_flags(run_argv(d, 1, short_train), {"--job-id", "other"}), d.log());
    CHECK(run.wait(30s) == kExitConfig);
    CHECK_THAT(slurp(d.log()), Catch::Contains("llama-7b") && Catch::Contains("other") &&
                                   Catch::Contains("--resume-from-job"));
  }
  SECTION("another id with --resume-from-job: taken over, resumed") {
    Background run(
        with_flags(run_argv(d, 1, short_train), {"--job-id", "other", "--resume-from-job"}),
        d.log());
    REQUIRE(run.wait(60s) == 0);
    CHECK(field(events_named(d, "start").back(), "job_id") == "other");
  }
}

TEST_CASE("runs that keep ending preempted without a commit stop being requeueable (exit 78)",
          "[run][integration]") {
  RunDirs d;
  // Ranks that never speak the protocol: a notice cannot be saved, every run ends 75 empty.
  std::ofstream(d.config()) << "[job]\ncheckpoint_dir = \"" << d.ckpt() << "\"\nrun_dir = \""
                            << d.run() << "\"\n[stop]\ngrace = \"3s\"\nsafety_margin = \"1s\"\n"
                            << "term_grace = \"1s\"\n[restart]\nfutile_requeue_limit = 2\n";
  const std::vector<std::string> argv = {shardguard_bin(), "run", "--config", d.config(),
                                         "--nproc", "1", "--", "sleep", "1000"};
  for (int i = 0; i < 2; ++i) {
    Background run(argv, d.log());
    REQUIRE(eventually([&] { return events_named(d, "launch").size() == size_t(i + 1); }, 20s));
    run.signal(SIGTERM);
    REQUIRE(run.wait(30s) == kExitPreempted);
  }
  Background run(argv, d.log());
  CHECK(run.wait(20s) == kExitConfig);
  CHECK_THAT(slurp(d.log()), Catch::Contains("requeueing will not help"));
  CHECK(events_named(d, "launch").size() == 2);
}

TEST_CASE("The no-progress loop breaker's count survives a requeue (checkpoint directory)",
          "[run][integration]") {
  RunDirs d;
  // Two crash restarts per run: each run ends (exit 76) before the third failure from the
  // same checkpoint, so only a count kept in the checkpoint directory reaches the limit (3).
  write_config(d, "[restart.crash]\nmax_restarts = 1\nwindow = \"1h\"\n");
  const std::vector<std::string> clean = {"--steps", "120", "--rows", "64", "--log-every", "0",
                                          "--checkpoint-every", "50"};
  {
    Background run(run_argv(d, 1, clean), d.log());
    REQUIRE(run.wait(60s) == 0);  // checkpoints 50, 100 and the final one at 120
  }
  // Every attempt crashes 5 steps after its resume: from 120, never a newer checkpoint.
  const std::vector<std::string> poisoned = {"--steps", "300", "--rows", "64", "--log-every",
                                             "0", "--checkpoint-every", "50", "--fail-after",
                                             "5", "--fail-code", "3", "--fault-attempt", "-1"};
  {
    Background run(run_argv(d, 1, poisoned), d.log());
    REQUIRE(run.wait(60s) == 76);  // two failures from step 120, then the crash budget
  }
  INFO(slurp(d.log()));
  CHECK(events_named(d, "fallback_checkpoint").empty());
  const std::string history = slurp(d.ckpt() + "/.shardguard/history.json");
  INFO(history);
  CHECK_FALSE(history.empty());
  {
    Background run(run_argv(d, 1, poisoned), d.log());
    REQUIRE(run.wait(60s) == 76);
  }
  // The requeued run's first failure from step 120 is the third: it falls back to step 100.
  auto fallback = events_named(d, "fallback_checkpoint");
  REQUIRE(fallback.size() == 1);
  CHECK(field(fallback[0], "step") == "120");
  auto launches = events_named(d, "launch");
  REQUIRE(launches.size() == 5);  // 1 + 2 + 2
  CHECK(field(launches.back(), "resume_step") == "100");
  // Step 120 is set aside with the evidence, never resumed again.
  auto quarantined = events_named(d, "quarantined");
  REQUIRE(quarantined.size() == 1);
  CHECK(field(quarantined[0], "step") == "120");
  CHECK_THAT(field(quarantined[0], "reason"), Catch::Contains("loop breaker"));
}

TEST_CASE("A disk that can never hold one more checkpoint: exit 78 at start, naming the sizes",
          "[run][integration]") {
  std::string why;
  auto disk = LoopFs::mount(48, &why);
  if (!disk) {
    WARN("skipped: " << why);
    return;
  }
  RunDirs d;
  const std::string ckpt = disk->path() + "/ckpt";
  // keep_last = 1: the newest complete checkpoint is all there is; nothing to reclaim.
  std::ofstream(d.config()) << "[job]\ncheckpoint_dir = \"" << ckpt << "\"\n"
                            << "run_dir = \"" << d.run() << "\"\n"
                            << "[checkpoint]\nevery_steps = 20\nkeep_last = 1\n";
  const std::vector<std::string> train = {"--steps", "40", "--rows", "4096", "--log-every", "0"};
  {
    Background run(run_argv(d, 1, train), d.log());
    REQUIRE(run.wait(120s) == 0);
  }
  // Something else fills the volume: less than one checkpoint is left.
  uint64_t bytes = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(ckpt + "/step-000000040"))
    if (e.is_regular_file()) bytes += e.file_size();
  REQUIRE(bytes > (1u << 20));
  disk->fill(bytes / 2);
  const std::vector<std::string> more = {"--steps", "80", "--rows", "4096", "--log-every", "0"};
  Background run(run_argv(d, 1, more), d.log());
  const auto code = run.wait(60s);
  const std::string log = slurp(d.log());
  INFO(log);
  CHECK(code == kExitConfig);
  CHECK_THAT(log, Catch::Contains("can never hold one more checkpoint"));
  CHECK(events_named(d, "launch").size() == 1);  // the first run's only
}

TEST_CASE("--resume-from STEP rolls back (newer steps quarantined), --resume-from none needs "
          "--fresh; unquarantine of a step written again is refused",
          "[run][integration]") {
  RunDirs d;
  write_config(d);
  const std::vector<std::string> train = {"--steps", "120", "--rows", "64", "--log-every", "0",
                                          "--checkpoint-every", "50"};
  {
    Background run(run_argv(d, 1, train), d.log());
    REQUIRE(run.wait(60s) == 0);  // steps 50, 100 and 120
  }
  auto attempt = [&](std::vector<std::string> flags) {
    Background run(with_flags(run_argv(d, 1, train), std::move(flags)), d.log());
    return run.wait(60s);
  };
  // Refusals: no such step; none while checkpoints exist.
  CHECK(attempt({"--resume-from", "75"}) == kExitUsage);
  CHECK_THAT(slurp(d.log()), Catch::Contains("--resume-from 75: no checkpoint of that step"));
  CHECK(attempt({"--resume-from", "none"}) == kExitUsage);
  CHECK_THAT(slurp(d.log()), Catch::Contains("add --fresh to set them all aside"));

  // The rollback: 120 and 100 set aside, the run resumes from 50 and trains to the end again.
  REQUIRE(attempt({"--resume-from", "50"}) == 0);
  INFO(slurp(d.log()));
  auto rollback = events_named(d, "rollback");
  REQUIRE(rollback.size() == 1);
  CHECK(field(rollback[0], "to_step") == "50");
  CHECK(field(rollback[0], "quarantined") == "120,100");
  CHECK(field(events_named(d, "launch").back(), "resume_step") == "50");
  CHECK(final_hash(d.ckpt()) == reference_hash(train));
  const auto ls = run_command(shardguard_bin() + " ckpt ls " + d.ckpt());
  CHECK_THAT(ls.out, Catch::Contains("QUARANTINED"));
  CHECK_THAT(ls.out, Catch::Contains("rolled back by shardguard run --resume-from 50"));
  // Step 100 was written again since: putting the old one back is refused.
  const auto back = run_command(shardguard_bin() + " ckpt unquarantine " + d.ckpt() + " --step 100");
  CHECK(back.exit_code != 0);
  CHECK_THAT(back.err, Catch::Contains("step-000000100"));

  // --fresh: every step set aside, a fresh start.
  REQUIRE(attempt({"--resume-from", "none", "--fresh"}) == 0);
  rollback = events_named(d, "rollback");
  REQUIRE(rollback.size() == 2);
  CHECK(field(rollback[1], "fresh") == "true");
  CHECK(field(rollback[1], "quarantined") == "120,100,50");
  CHECK(field(events_named(d, "launch").back(), "resume_step") == "-1");
  CHECK(final_hash(d.ckpt()) == reference_hash(train));
}

TEST_CASE("Quarantined steps are kept for [checkpoint] quarantine_keep, then removed at start",
          "[run][integration]") {
  RunDirs d;
  auto config = [&](const std::string& keep) {
    std::ofstream(d.config()) << "[job]\ncheckpoint_dir = \"" << d.ckpt() << "\"\n"
                              << "run_dir = \"" << d.run() << "\"\n"
                              << "[checkpoint]\nevery_steps = 50\nquarantine_keep = \"" << keep
                              << "\"\n";
  };
  const std::vector<std::string> train = {"--steps", "120", "--rows", "16", "--log-every", "0"};
  config("1h");
  {
    Background run(run_argv(d, 1, train), d.log());
    REQUIRE(run.wait(60s) == 0);
  }
  const auto q = run_command(shardguard_bin() + " ckpt quarantine " + d.ckpt() +
                             " --step 100 --reason 'suspect weights'");
  REQUIRE(q.exit_code == 0);
  std::this_thread::sleep_for(1200ms);
  {  // kept: younger than an hour
    Background run(run_argv(d, 1, train), d.log());
    REQUIRE(run.wait(60s) == 0);
  }
  CHECK_THAT(run_command(shardguard_bin() + " ckpt ls " + d.ckpt()).out,
             Catch::Contains("suspect weights"));
  config("1s");
  {  // removed: older than a second
    Background run(run_argv(d, 1, train), d.log());
    REQUIRE(run.wait(60s) == 0);
  }
  INFO(slurp(d.log()));
  CHECK_THAT(slurp(d.log()), Catch::Contains("removed quarantined step 100"));
  CHECK_THAT(run_command(shardguard_bin() + " ckpt ls " + d.ckpt()).out,
             !Catch::Contains("suspect weights"));
}
