// The shipped examples/slurm/train.sbatch on a real one-node Slurm, the example C++ trainer
// (2 ranks) under `shardguard run` as the job, stopped the ways a user and Slurm stop it:
//   scancel --signal=USR1 --batch   emergency checkpoint, exit 75, shardguard requeues it
//   scontrol requeue                emergency checkpoint, exit 75, Slurm requeued it: once
//   scancel                         emergency checkpoint, exit 75, the job ends CANCELLED
//   --signal=B:USR1@50 --time=1     emergency checkpoint, exit 75, shardguard requeues it
// Each requeued job resumes and ends with weights bit-identical to an uninterrupted run.
#include "agent/slurm_scontrol.h"
#include "tests/slurm/slurm_job_util.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

SlurmCluster& cluster() {
  static std::unique_ptr<SlurmCluster> c = [] {
    SlurmOptions o;
    o.nodes = 1;
    return start_cluster(o);
  }();
  return *c;
}

std::vector<std::string> train(int steps, int sleep_ms = 10) {
  return {"--steps",    std::to_string(steps),   "--rows", "64", "--log-every", "0",
          "--sleep-ms", std::to_string(sleep_ms)};
}

// The job ran twice: one emergency checkpoint, then a resume from it to the end.
void check_resumed_once(const SlurmRun& run, const std::vector<std::string>& args) {
  const auto launches = run.named("launch");
  const auto emergencies = run.named("checkpoint_committed");
  REQUIRE(launches.size() >= 2);
  const auto slurm_jobs = run.named("slurm_job");
  REQUIRE(slurm_jobs.size() == 2);
  CHECK(field(slurm_jobs[0], "restart_count") == "0");
  CHECK(field(slurm_jobs[1], "restart_count") == "1");
  CHECK(field(launches.back(), "resume_step") != "-1");
  CHECK(final_hash(run.dirs.ckpt()) == uninterrupted_hash(args));
}

}  // namespace

TEST_CASE("slurm: the scontrol adapter against the real Slurm (the production runner)",
          "[integration]") {
  SG_SLURM_OR_SKIP();
  auto& c = cluster();
  REQUIRE(c.cancel_all_jobs().ok());
  ::setenv("SLURM_CONF", c.conf_path().c_str(), 1);
  const shardguard::agent::Scontrol sc(shardguard::agent::run_command_blocking);
  // What resolve_placement() gets in production for the coordinator host.
  auto hosts = sc.hostnames_function()("n[1-3],gpu7");
  REQUIRE(hosts.ok());
  CHECK(*hosts == std::vector<std::string>{"n1", "n2", "n3", "gpu7"});
  CHECK_FALSE(*sc.requeue_exit_lists(75));
  const auto id = submit_or_fail(c, "#!/bin/bash\nsleep 60\n", {"--requeue"});
  wait_state_or_fail(c, id, {"RUNNING"}, 30s);
  auto j = sc.show_job(id);
  REQUIRE(j.ok());
  CHECK(j->job_id == id);
  CHECK(j->state == "RUNNING");
  CHECK(j->requeueable);
  CHECK_FALSE(j->preempting);
  CHECK(j->batch_host == "n1");
  // ExcNodeList is refused while the job runs, accepted once it is requeued.
  auto running = sc.set_excluded_nodes(id, "n1");
  REQUIRE_FALSE(running.ok());
  CHECK_THAT(running.error().message(), Catch::Contains("scontrol update JobId="));
  REQUIRE(sc.requeue(id).ok());
  CHECK(sc.set_excluded_nodes(id, "n1").ok());
  CHECK(sc.show_job(id)->exc_nodes == "n1");
  CHECK(sc.show_job(id)->restarts == 1);
  auto twice = sc.requeue(id);  // pending now: Slurm refuses a second requeue
  REQUIRE_FALSE(twice.ok());
  CHECK_THAT(twice.error().message(), Catch::Contains("pending"));
  ::unsetenv("SLURM_CONF");
  REQUIRE(c.cancel_all_jobs().ok());
}

TEST_CASE(
    "slurm + shardguard: scancel --signal=USR1 --batch -> emergency checkpoint, exit 75, "
    "requeued by shardguard, resumed bit-identical",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  auto& c = cluster();
  REQUIRE(c.cancel_all_jobs().ok());
  const auto args = train(600);
  SlurmRun run(args);
  const auto id = submit_or_fail(c, shipped_script(), run.sbatch_args());
  wait_state_or_fail(c, id, {"RUNNING"}, 30s);
  run.wait_hellos(2, 30s);
  std::this_thread::sleep_for(500ms);
  REQUIRE(c.run({"scancel", "--signal=USR1", "--batch", std::to_string(id)})->exit_code == 0);
  run.wait_event("slurm_decision", 1, 30s);
  const auto job = wait_completed(c, id, run, 120s);
  print_decisions("scancel --signal=USR1 --batch", run);
  INFO(run.events_text());
  CHECK(last_field(run, "notice", "kind") == "sigusr1");
  CHECK(field(run.named("slurm_decision").at(0), "case") == "signal-lead");
  CHECK(field(run.named("slurm_decision").at(0), "requeue") == "true");
  CHECK(field(run.named("slurm_requeue").at(0), "ok") == "true");
  CHECK(field(run.named("finish").at(0), "exit_code") == "75");
  CHECK(job.restarts() == 1);
  // --open-mode=append: both runs in one log.
  const std::string out = slurp(c.job_output_path(id));
  INFO(out);
  CHECK(out.find("run 0 on") != std::string::npos);
  CHECK(out.find("run 1 on") != std::string::npos);
  CHECK(out.find("shardguard exited 75") != std::string::npos);
  CHECK(out.find("shardguard exited 0") != std::string::npos);
  check_resumed_once(run, args);
  // The job got the CPUs its ranks use (--cpus-per-task, passed on to srun).
  CHECK(job.get("NumCPUs") == "2");
}

TEST_CASE(
    "slurm + shardguard: scontrol requeue -> emergency checkpoint, exit 75, requeued once (by "
    "Slurm), resumed bit-identical",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  auto& c = cluster();
  REQUIRE(c.cancel_all_jobs().ok());
  const auto args = train(600);
  SlurmRun run(args);
  const auto id = submit_or_fail(c, shipped_script(), run.sbatch_args());
  wait_state_or_fail(c, id, {"RUNNING"}, 30s);
  run.wait_hellos(2, 30s);
  std::this_thread::sleep_for(500ms);
  REQUIRE(c.run({"scontrol", "requeue", std::to_string(id)})->exit_code == 0);
  run.wait_event("slurm_decision", 1, 30s);
  const auto job = wait_completed(c, id, run, 120s);
  print_decisions("scontrol requeue", run);
  INFO(run.events_text());
  CHECK(last_field(run, "notice", "kind") == "sigterm");
  CHECK(field(run.named("slurm_decision").at(0), "case") == "requeued-by-slurm");
  CHECK(run.named("slurm_requeue").empty());  // never twice
  CHECK(job.restarts() == 1);
  check_resumed_once(run, args);
}

TEST_CASE("slurm + shardguard: scancel -> emergency checkpoint, exit 75, the job ends CANCELLED",
          "[integration]") {
  SG_SLURM_OR_SKIP();
  auto& c = cluster();
  REQUIRE(c.cancel_all_jobs().ok());
  SlurmRun run(train(1000));
  const auto id = submit_or_fail(c, shipped_script(), run.sbatch_args());
  wait_state_or_fail(c, id, {"RUNNING"}, 30s);
  run.wait_hellos(2, 30s);
  std::this_thread::sleep_for(500ms);
  REQUIRE(c.run({"scancel", std::to_string(id)})->exit_code == 0);
  const auto job = wait_state_or_fail(c, id, {"CANCELLED", "PENDING", "RUNNING"}, 30s);
  std::this_thread::sleep_for(3s);  // a wrongful requeue would show by now
  const auto after = c.job(id);
  print_decisions("scancel", run);
  INFO(run.events_text() << "\njob output:\n" << slurp(c.job_output_path(id)));
  REQUIRE(after.ok());
  CHECK(after->state() == "CANCELLED");
  CHECK(after->restarts() == 0);
  // Every rank caught Slurm's SIGTERM and saved the step shardguard named.
  REQUIRE(run.named("checkpoint_committed").size() >= 1);
  CHECK_THAT(run_command(shardguard_bin() + " ckpt ls " + run.dirs.ckpt()).out,
             Catch::Contains("emergency"));
  for (const auto& e : run.named("rank_exit")) CHECK(field(e, "status") == "exited with code 75");
  CHECK(field(run.named("slurm_decision").at(0), "case") == "cancelled");
  CHECK(run.named("slurm_requeue").empty());
  (void)job;
}

TEST_CASE(
    "slurm + shardguard: --signal=B:USR1 before the time limit -> emergency checkpoint, exit 75, "
    "requeued by shardguard, resumed bit-identical",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  auto& c = cluster();
  REQUIRE(c.cancel_all_jobs().ok());
  // slurmctld sends the signal when its 30 s check finds the job within 50 s of its 1-minute
  // limit (5-22 s after the start here): the training outlasts that.
  const auto args = train(2500, 20);
  SlurmRun run(args);
  const auto id =
      submit_or_fail(c, shipped_script(), run.sbatch_args({"--time=1", "--signal=B:USR1@50"}));
  wait_state_or_fail(c, id, {"RUNNING"}, 30s);
  run.wait_event("slurm_decision", 1, 90s);
  // The rerun gets the same limit and would be signalled again: give it time to finish.
  wait_state_or_fail(c, id, {"PENDING"}, 30s);
  REQUIRE(c.run({"scontrol", "update", "JobId=" + std::to_string(id), "TimeLimit=10"})->exit_code ==
          0);
  const auto job = wait_completed(c, id, run, 180s);
  print_decisions("--signal=B:USR1@50 --time=1", run);
  INFO(run.events_text());
  CHECK(run.named("notice").at(0).fields.size() > 0);
  CHECK(field(run.named("notice").at(0), "kind") == "sigusr1");
  CHECK(field(run.named("slurm_decision").at(0), "case") == "signal-lead");
  CHECK(field(run.named("slurm_requeue").at(0), "ok") == "true");
  CHECK(job.restarts() == 1);
  check_resumed_once(run, args);
}

TEST_CASE(
    "slurm + shardguard: with RequeueExit=75 in slurm.conf Slurm requeues exit 75 itself, and "
    "shardguard does not requeue a second time",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  SlurmOptions o;
  o.nodes = 1;
  o.extra_conf = {"RequeueExit=75"};
  auto c = start_cluster(o);
  const auto args = train(600);
  SlurmRun run(args);
  const auto id = submit_or_fail(*c, shipped_script(), run.sbatch_args());
  wait_state_or_fail(*c, id, {"RUNNING"}, 30s);
  run.wait_hellos(2, 30s);
  std::this_thread::sleep_for(500ms);
  REQUIRE(c->run({"scancel", "--signal=USR1", "--batch", std::to_string(id)})->exit_code == 0);
  run.wait_event("slurm_decision", 1, 30s);
  const auto job = wait_completed(*c, id, run, 120s);
  print_decisions("RequeueExit=75, scancel --signal=USR1 --batch", run);
  INFO(run.events_text());
  const auto decision = run.named("slurm_decision").at(0);
  CHECK(field(decision, "case") == "signal-lead");
  CHECK(field(decision, "requeue") == "false");
  CHECK_THAT(field(decision, "why"), Catch::Contains("RequeueExit=75"));
  CHECK(run.named("slurm_requeue").empty());
  CHECK(job.restarts() == 1);  // by Slurm, once
  check_resumed_once(run, args);
}
