// SIGTERM to every process, as Slurm sends it on scancel, a time limit, preemption or
// requeue: `shardguard run` over the example trainer (2 ranks), real signals. The ranks
// catch it, tell the supervisor and keep training until it names the step every rank saves:
// an emergency checkpoint, exit 75, and the next run resumes bit-identical. A SIGTERM that
// reaches shardguard and every rank at once counts once (no escalation to the safety margin).
#include <signal.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "tests/run/run_fixture.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

const std::vector<std::string> kTrain = {
    "--steps", "400", "--rows", "64", "--log-every", "0", "--sleep-ms", "5", "--checkpoint-every",
    "1000"};

void write_sigterm_config(const RunDirs& d) {
  std::ofstream(d.config()) << "[job]\ncheckpoint_dir = \"" << d.ckpt() << "\"\nrun_dir = \""
                            << d.run() << "\"\n[restart]\nbackoff_initial = \"10ms\"\n"
                            << "[stop]\ngrace = \"20s\"\nterm_grace = \"2s\"\n"
                            << "[checkpoint]\nevery_steps = 1000\n";
}

std::vector<pid_t> rank_pids(const RunDirs& d) {
  std::vector<pid_t> pids;
  for (const auto& h : events_named(d, "hello")) pids.push_back(std::stoi(field(h, "pid")));
  return pids;
}

}  // namespace

TEST_CASE(
    "SIGTERM to the ranks alone: they tell the supervisor, one emergency checkpoint of the step "
    "it names, exit 75, bit-identical resume",
    "[integration]") {
  const bool with_shardguard = GENERATE(false, true);
  INFO((with_shardguard ? "SIGTERM to shardguard and every rank at once" : "to every rank only"));
  RunDirs d;
  write_sigterm_config(d);
  {
    Background run(run_argv(d, 2, kTrain), d.log());
    REQUIRE(eventually([&] { return events_named(d, "hello").size() == 2; }, 20s));
    std::this_thread::sleep_for(300ms);
    const auto pids = rank_pids(d);
    REQUIRE(pids.size() == 2);
    if (with_shardguard) run.signal(SIGTERM);
    for (pid_t p : pids) REQUIRE(::kill(p, SIGTERM) == 0);
    auto code = run.wait(30s);
    INFO(slurp(d.log()));
    REQUIRE(code == 75);
  }
  INFO(slurp(d.run() + "/events.jsonl"));
  // Each rank reported it; the reports made one notice.
  const auto reports = events_named(d, "rank_signal");
  REQUIRE(reports.size() == 2);
  int counted = 0;
  for (const auto& r : reports) {
    CHECK(field(r, "signal") == "SIGTERM");
    counted += field(r, "notice") == "true";
  }
  CHECK(counted == 1);
  CHECK(events_named(d, "notice").size() == (with_shardguard ? 2u : 1u));
  // Counted once: a second SIGTERM would have shortened the deadline to the safety margin.
  CHECK(events_named(d, "deadline_shortened").empty());
  // Both ranks saved the step the supervisor named: one emergency checkpoint, no crash.
  const auto committed = events_named(d, "checkpoint_committed");
  REQUIRE(committed.size() == 1);
  CHECK(field(events_named(d, "checkpoint_now").at(0), "at_step") == field(committed[0], "step"));
  CHECK_THAT(run_command(shardguard_bin() + " ckpt ls " + d.ckpt()).out,
             Catch::Contains("emergency"));
  for (const auto& e : events_named(d, "rank_exit"))
    CHECK(field(e, "status") == "exited with code 75");

  Background again(run_argv(d, 2, kTrain), d.log());
  REQUIRE(again.wait(60s) == 0);
  const auto launches = events_named(d, "launch");
  REQUIRE(launches.size() == 2);
  CHECK(field(launches[1], "resume_step") == field(committed[0], "step"));
  CHECK(final_hash(d.ckpt()) == reference_hash(kTrain));
}

TEST_CASE("SHARDGUARD_HANDLE_SIGTERM=0 in the job's environment: a rank dies of SIGTERM",
          "[integration]") {
  RunDirs d;
  write_sigterm_config(d);
  std::ofstream(d.config(), std::ios::app) << "[job.env]\nSHARDGUARD_HANDLE_SIGTERM = \"0\"\n"
                                           << "[restart.crash]\nmax_restarts = 0\n";
  Background run(run_argv(d, 2, kTrain), d.log());
  REQUIRE(eventually([&] { return events_named(d, "hello").size() == 2; }, 20s));
  const auto pids = rank_pids(d);
  REQUIRE(::kill(pids.at(1), SIGTERM) == 0);
  auto code = run.wait(30s);
  INFO(slurp(d.log()));
  REQUIRE(code.has_value());
  CHECK(*code != 75);
  CHECK(events_named(d, "rank_signal").empty());
  CHECK(events_named(d, "checkpoint_committed").empty());
}
