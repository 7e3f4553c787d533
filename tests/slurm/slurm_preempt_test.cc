// Preemption by partition priority (PreemptType=preempt/partition_prio): a job in the
// high partition takes the only node from a running low-partition job, in REQUEUE and in
// CANCEL mode, with GraceTime on the low partition. What each process of the victim gets,
// when, and how the victim ends.
#include <algorithm>
#include <cmath>
#include <iostream>

#include "tests/slurm/slurm_test_util.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

TEST_CASE("slurm: preemption of a low-priority job by a high-priority partition job",
          "[integration]") {
  SG_SLURM_OR_SKIP();
  const std::string mode = GENERATE(std::string("REQUEUE"), std::string("CANCEL"));
  INFO("PreemptMode=" << mode);
  SlurmOptions options;
  options.nodes = 1;
  options.preempt_mode = mode;
  options.grace_time_s = 5;
  auto c = start_cluster(options);
  TempDir tmp;
  const std::string log = tmp / "victim.log";
  // The victim's batch shell exits 75 a second after its first SIGTERM, like a trainer that
  // checkpoints; the step's processes keep running. (No child of the batch shell: orphaned by
  // its exit, proctrack/linuxproc would lose it.) Both jobs want the whole node.
  const auto victim =
      submit_or_fail(*c, recorder_script({log, 1, "", "--exit-on-term 75 1000", false}),
                     {"-p", kSlurmLowPartition, "--exclusive", "--requeue"});
  wait_state_or_fail(*c, victim, {"RUNNING"}, 30s);
  for (const char* who : {"batch", "step0", "step0.child"}) wait_event(log, who, "start", 20s);

  const double t0 = unix_now();
  const auto high = submit_or_fail(*c, "#!/bin/bash\necho high $SLURMD_NODENAME\nsleep 2\n",
                                   {"-p", kSlurmHighPartition, "--exclusive"});
  const auto preempted = wait_event_after(log, "step0", "TERM", t0, 30s);
  const auto during = c->job(victim);
  const auto batch_term = wait_event_after(log, "batch", "TERM", t0, 60s);
  const auto deadline = std::chrono::steady_clock::now() + 40s;
  while (!c->job_pids(victim).empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(50ms);
  const double gone = unix_now();
  wait_state_or_fail(*c, high, {"RUNNING", "COMPLETED"}, 40s);
  const double high_started = unix_now();
  const auto after = c->job(victim);
  REQUIRE(after.ok());
  const auto events = parse_signal_log(slurp(log));
  std::cout << "--- PreemptMode=" << mode << " GraceTime=" << options.grace_time_s
            << " KillWait=" << c->options().kill_wait_s
            << "; the victim's batch shell exits 75 1 s after SIGTERM (t=0: high job submitted)\n"
            << describe_events(events, t0) << "victim processes gone @+" << (gone - t0)
            << "s; high job running @+" << (high_started - t0) << "s\n"
            << "victim while preempted: JobState=" << (during.ok() ? during->state() : "?")
            << "; after: JobState=" << after->state() << " Reason=" << after->reason()
            << " Restarts=" << after->restarts() << " ExitCode=" << after->get("ExitCode") << "\n";

  // At once: SIGCONT + SIGTERM to every process of the job's steps, not to the batch shell.
  CHECK(preempted.time - t0 < 5);
  CHECK(first_event(events, "step0.child", "TERM"));
  {
    INFO(describe_events(events, t0));
    for (const auto& e : events)
      if (e.who == "batch" && e.time >= t0 && e.event != "start")
        CHECK(e.time >= preempted.time + options.grace_time_s - 0.5);
  }
  // When GraceTime has passed (found by a periodic check, so up to ~30 s later): SIGCONT +
  // SIGTERM to every process, batch shell included, and SIGKILL after KillWait.
  CHECK(batch_term.time - preempted.time >= options.grace_time_s - 0.5);
  CHECK(batch_term.time - preempted.time <= options.grace_time_s + 35);
  const auto second_step_term = wait_event_after(log, "step0", "TERM", batch_term.time - 1, 1s);
  CHECK(std::abs(second_step_term.time - batch_term.time) < 1);
  const auto exit = first_event(events, "batch", "exit");
  REQUIRE(exit);
  CHECK(exit->info.at("code") == "75");
  CHECK(gone - batch_term.time >= c->options().kill_wait_s - 0.5);  // the step: SIGKILL
  CHECK(gone - batch_term.time <= c->options().kill_wait_s + 5);

  if (mode == "REQUEUE") {
    // Slurm requeues it itself, whatever the exit code (75 is not even recorded).
    CHECK(after->state() == "PENDING");
    CHECK(after->restarts() == 1);
    CHECK(after->get("ExitCode") == "0:0");
    wait_state_or_fail(*c, high, {"COMPLETED"}, 30s);
    const auto rerun = wait_event_after(log, "batch", "start", gone, 60s);
    CHECK(rerun.info.at("restart") == "1");
    std::cout << "victim runs again @+" << (rerun.time - t0)
              << "s with SLURM_RESTART_COUNT=" << rerun.info.at("restart") << "\n";
  } else {
    const auto final_state = wait_state_or_fail(*c, victim, {"PREEMPTED", "CANCELLED"}, 30s);
    CHECK(final_state.state() == "PREEMPTED");
    CHECK(final_state.restarts() == 0);
    CHECK(final_state.get("ExitCode") == "75:0");
  }
}
