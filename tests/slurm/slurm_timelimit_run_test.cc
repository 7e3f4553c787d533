// A time limit without --signal, with shardguard as the job (the shipped script less its
// --signal line): Slurm sends SIGTERM to every process when slurmctld's 30 s check finds the
// limit passed (86-87 s after a 1-minute job started, here), then SIGKILL after KillWait. The
// ranks and shardguard catch it, the emergency checkpoint commits within KillWait, and
// shardguard requeues the TIMEOUT job; the rerun resumes and ends bit-identical. Its own
// binary: it takes about 2.5 minutes, which ctest -j2 runs beside the other Slurm tests.
#include "tests/slurm/slurm_job_util.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

TEST_CASE(
    "slurm + shardguard: a time limit without --signal -> SIGTERM to every process, emergency "
    "checkpoint within KillWait, exit 75, requeued by shardguard, resumed bit-identical",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  SlurmOptions options;
  options.nodes = 1;
  auto c = start_cluster(options);
  // About 100 s of training: the limit (60-90 s) comes first.
  const std::vector<std::string> args = {"--steps",     "5000", "--rows",     "64",
                                         "--log-every", "0",    "--sleep-ms", "20"};
  SlurmRun run(args);
  const std::string script = without_lines(shipped_script(), "#SBATCH --signal");
  REQUIRE(script.find("#SBATCH --signal") == std::string::npos);
  const auto id = submit_or_fail(*c, script, run.sbatch_args({"--time=1"}));
  wait_state_or_fail(*c, id, {"RUNNING"}, 30s);
  run.wait_event("slurm_decision", 1, 150s);
  // The rerun gets the same limit: give it time to finish.
  wait_state_or_fail(*c, id, {"PENDING"}, 30s);
  REQUIRE(
      c->run({"scontrol", "update", "JobId=" + std::to_string(id), "TimeLimit=10"})->exit_code ==
      0);
  const auto job = wait_completed(*c, id, run, 240s);
  print_decisions("time limit, no --signal", run);
  INFO(run.events_text());
  const auto notices = run.named("notice");
  REQUIRE(!notices.empty());
  CHECK(field(notices[0], "kind") == "sigterm");
  // Slurm sends the steps SIGTERM twice in quick succession: counted once.
  CHECK(run.named("deadline_shortened").empty());
  // Every read of the job's state succeeded (scontrol survives Slurm's SIGTERM to the job).
  const auto states = run.named("slurm_state");
  REQUIRE(!states.empty());
  for (const auto& st : states) CHECK(field(st, "error").empty());
  CHECK(field(states[0], "reason") == "TimeLimit");
  CHECK(field(run.named("slurm_decision").at(0), "case") == "time-limit");
  CHECK(field(run.named("slurm_requeue").at(0), "ok") == "true");
  CHECK(job.restarts() == 1);
  // The emergency checkpoint committed well within KillWait of the signal.
  const auto committed = run.named("checkpoint_committed");
  int64_t first_commit_after = -1;
  for (const auto& e : committed)
    if (e.time_unix_ms >= notices[0].time_unix_ms) {
      first_commit_after = e.time_unix_ms - notices[0].time_unix_ms;
      break;
    }
  std::cout << "SIGTERM -> emergency checkpoint committed in " << first_commit_after << " ms\n";
  CHECK(first_commit_after >= 0);
  CHECK(first_commit_after < c->options().kill_wait_s * 1000);
  CHECK(field(run.named("launch").back(), "resume_step") != "-1");
  CHECK(final_hash(run.dirs.ckpt()) == uninterrupted_hash(args));
}
