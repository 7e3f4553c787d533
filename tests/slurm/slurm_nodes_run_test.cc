// Node trouble with shardguard as the job: kill -9 of the node's slurmd and of the job
// ("the machine died") - Slurm's own --requeue reruns it on another node, which resumes from
// the last periodic checkpoint; and a node that fails a health check (a fatal GPU XID in its
// kernel log) - emergency checkpoint, exit 75, shardguard requeues the job with that node in
// ExcNodeList, and it reruns elsewhere. Both end bit-identical to an uninterrupted run.
#include "tests/slurm/slurm_job_util.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> train(int steps) {
  return {"--steps", std::to_string(steps), "--rows", "64", "--log-every", "0", "--sleep-ms", "20"};
}

}  // namespace

TEST_CASE(
    "slurm + shardguard: kill -9 of the node and the job -> Slurm requeues it elsewhere, resumed "
    "from the last periodic checkpoint, bit-identical",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  SlurmOptions options;
  options.nodes = 2;
  auto c = start_cluster(options);
  const auto args = train(1200);
  SlurmRun run(args);
  const auto id = submit_or_fail(*c, shipped_script(), run.sbatch_args());
  const auto running = wait_state_or_fail(*c, id, {"RUNNING"}, 30s);
  run.wait_event("checkpoint_committed", 2, 60s);
  const std::string host = running.batch_host();
  REQUIRE(c->kill_node(host).ok());
  // Slurm notices after about SlurmdTimeout + 2 x MessageTimeout, then requeues (--requeue).
  const auto job = wait_completed(*c, id, run, 180s);
  print_decisions("kill -9 of " + host, run);
  INFO(run.events_text());
  CHECK(job.restarts() == 1);
  CHECK(job.batch_host() != host);
  CHECK(run.named("notice").empty());  // nothing warned: the machine just vanished
  CHECK(run.named("slurm_requeue").empty());
  const auto jobs = run.named("slurm_job");
  REQUIRE(jobs.size() == 2);
  CHECK(field(jobs[1], "restart_count") == "1");
  CHECK(field(jobs[1], "node") != host);
  CHECK(field(run.named("launch").back(), "resume_step") != "-1");
  CHECK(final_hash(run.dirs.ckpt()) == uninterrupted_hash(args));
  REQUIRE(c->restart_node(host).ok());
}

TEST_CASE(
    "slurm + shardguard: a node fails a health check -> emergency checkpoint, exit 75, requeued "
    "with the node in ExcNodeList, resumed elsewhere bit-identical",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  SlurmOptions options;
  options.nodes = 3;
  auto c = start_cluster(options);
  TempDir logs;
  const std::string kmsg = logs / "kmsg.log";
  spit(kmsg, "");
  const auto args = train(1000);
  SlurmRun run(args, "[health]\nkernel_log = \"" + kmsg +
                         "\"\ncheck_interval = \"200ms\"\ndisk = false\nmemory = false\n"
                         "gpu = false\n");
  const auto id = submit_or_fail(*c, shipped_script(), run.sbatch_args());
  const auto running = wait_state_or_fail(*c, id, {"RUNNING"}, 30s);
  run.wait_hellos(2, 30s);
  std::this_thread::sleep_for(500ms);
  const std::string host = running.batch_host();
  std::ofstream(kmsg, std::ios::app)
      << "[12345.678] NVRM: Xid (PCI:0000:10:1c): 79, pid=4242, name=sg_trainer, GPU has fallen "
         "off the bus.\n";
  run.wait_event("slurm_decision", 1, 60s);
  const auto job = wait_completed(*c, id, run, 120s);
  print_decisions("health check failed on " + host, run);
  INFO(run.events_text());
  CHECK(run.named("node_unhealthy").size() == 1);
  const auto decision = run.named("slurm_decision").at(0);
  CHECK(field(decision, "case") == "node-unhealthy");
  CHECK(field(decision, "exclude_node") == host);
  CHECK(field(run.named("slurm_requeue").at(0), "ok") == "true");
  CHECK(field(run.named("slurm_exclude").at(0), "ok") == "true");
  CHECK(job.get("ExcNodeList") == host);
  CHECK(job.batch_host() != host);
  CHECK(job.restarts() == 1);
  CHECK_THAT(run_command(shardguard_bin() + " ckpt ls " + run.dirs.ckpt()).out,
             Catch::Contains("emergency"));
  CHECK(field(run.named("launch").back(), "resume_step") != "-1");
  CHECK(final_hash(run.dirs.ckpt()) == uninterrupted_hash(args));
}
