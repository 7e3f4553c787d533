// Preemption of a shardguard job by a job in a higher-priority partition
// (PreemptType=preempt/partition_prio), REQUEUE and CANCEL modes, GraceTime 5 s: Slurm sends
// SIGTERM to every step process at once; the emergency checkpoint commits within the grace
// and shardguard exits 75. Slurm requeues (REQUEUE mode) only a job still running when the
// grace ends, so in both modes shardguard requeues it itself, once; the victim reruns after
// the preemptor and ends bit-identical.
#include "tests/slurm/slurm_job_util.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

TEST_CASE(
    "slurm + shardguard: preemption by a higher-priority partition job -> emergency checkpoint "
    "within GraceTime, exit 75, requeued once, resumed bit-identical",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  const std::string mode = GENERATE(std::string("REQUEUE"), std::string("CANCEL"));
  INFO("PreemptMode=" << mode);
  SlurmOptions options;
  options.nodes = 1;
  options.preempt_mode = mode;
  auto c = start_cluster(options);
  const std::vector<std::string> args = {"--steps",     "800", "--rows",     "64",
                                         "--log-every", "0",   "--sleep-ms", "10"};
  SlurmRun run(args);
  const auto victim = submit_or_fail(*c, shipped_script(),
                                     run.sbatch_args({"-p", kSlurmLowPartition, "--exclusive"}));
  wait_state_or_fail(*c, victim, {"RUNNING"}, 30s);
  run.wait_hellos(2, 30s);
  std::this_thread::sleep_for(500ms);
  const auto high =
      submit_or_fail(*c, "#!/bin/bash\nsleep 3\n", {"-p", kSlurmHighPartition, "--exclusive"});
  run.wait_event("slurm_decision", 1, 60s);
  const auto high_job = wait_state_or_fail(*c, high, {"COMPLETED"}, 90s);
  const auto job = wait_completed(*c, victim, run, 120s);
  print_decisions("preemption, PreemptMode=" + mode, run);
  INFO(run.events_text());
  CHECK(field(run.named("notice").at(0), "kind") == "sigterm");
  CHECK(field(run.named("slurm_state").at(0), "preempting") == "true");
  const auto decision = run.named("slurm_decision").at(0);
  CHECK(field(decision, "case") == "preempted");
  CHECK(field(decision, "requeue") == "true");
  CHECK(field(run.named("slurm_requeue").at(0), "ok") == "true");
  CHECK(job.restarts() == 1);  // once: Slurm did not requeue it a second time
  CHECK(field(run.named("launch").back(), "resume_step") != "-1");
  CHECK(final_hash(run.dirs.ckpt()) == uninterrupted_hash(args));
  (void)high_job;
}
