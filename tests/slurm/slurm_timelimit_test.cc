// A time limit without --signal: what every process of the job receives, and when. Slurm
// counts limits in whole minutes and checks them every 30 s, so this takes 60-95 s: it has
// its own binary so that ctest -j2 runs it beside the other Slurm tests.
#include <algorithm>
#include <iostream>

#include "tests/slurm/slurm_test_util.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

TEST_CASE("slurm: a time limit sends SIGTERM to every process, SIGKILL after KillWait; TIMEOUT",
          "[integration]") {
  SG_SLURM_OR_SKIP();
  SlurmOptions options;
  options.nodes = 1;
  auto c = start_cluster(options);
  TempDir tmp;
  const std::string log = tmp / "signals.log";
  const auto id = submit_or_fail(*c, recorder_script({log, 1, ""}), {"--time=1"});
  for (const char* who : {"batch", "batch.child", "step0", "step0.child"})
    wait_event(log, who, "start", 30s);
  const double batch_start = first_event(parse_signal_log(slurp(log)), "batch", "start")->time;

  const auto term = wait_event_after(log, "batch", "TERM", batch_start, 120s);
  // Gone: no process of the job left.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!c->job_pids(id).empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(50ms);
  const double gone = unix_now();
  const auto job = wait_state_or_fail(*c, id, {"TIMEOUT"}, 30s);
  std::cout << "--- time limit 1 min, no --signal (t=0: the batch shell started)\n"
            << describe_events(parse_signal_log(slurp(log)), batch_start) << "processes gone @+"
            << (gone - batch_start) << "s; JobState=" << job.state() << " Reason=" << job.reason()
            << " ExitCode=" << job.get("ExitCode") << "\n";

  const auto events = parse_signal_log(slurp(log));
  for (const char* who : {"batch", "batch.child", "step0", "step0.child"}) {
    INFO(who << "\n" << describe_events(events, batch_start));
    const auto t = first_event(events, who, "TERM");
    REQUIRE(t);
    CHECK(t->time - batch_start >= 59);  // not before the limit
    CHECK(t->time - batch_start <= 60 + 35);
    const auto seen = events_of(events, who);
    CHECK(std::find(seen.begin(), seen.end(), "USR1") == seen.end());
    CHECK(std::find(seen.begin(), seen.end(), "exit") == seen.end());  // SIGKILLed
  }
  CHECK(gone - term.time >= c->options().kill_wait_s - 0.5);
  CHECK(gone - term.time <= c->options().kill_wait_s + 5);
  CHECK(job.reason() == "TimeLimit");
  CHECK(job.restarts() == 0);
}
