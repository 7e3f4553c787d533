// Node failures and node exclusion on a 3-node cluster: kill -9 of a node's slurmd and the
// job's processes on it ("the machine died"), the node marked DOWN within the shortened
// SlurmdTimeout, the job requeued (--requeue) or ended NODE_FAIL (--no-requeue), the node
// back after its slurmd restarts; a drained node resumed by hand; and a job requeued with
// its node in ExcNodeList (what shardguard does after a failed health check).
#include <algorithm>
#include <iostream>

#include "tests/slurm/slurm_test_util.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

SlurmOptions three_nodes() {
  SlurmOptions o;
  o.nodes = 3;
  return o;
}

}  // namespace

TEST_CASE("slurm: kill -9 of a node with a job on it: DOWN, requeued elsewhere, back on restart",
          "[integration]") {
  SG_SLURM_OR_SKIP();
  const bool requeue = GENERATE(true, false);
  INFO((requeue ? "--requeue" : "--no-requeue"));
  auto c = start_cluster(three_nodes());
  TempDir tmp;
  const std::string log = tmp / "signals.log";
  const auto id =
      submit_or_fail(*c, recorder_script({log, 1, ""}), {requeue ? "--requeue" : "--no-requeue"});
  const auto running = wait_state_or_fail(*c, id, {"RUNNING"}, 30s);
  for (const char* who : {"batch", "batch.child", "step0", "step0.child"})
    wait_event(log, who, "start", 20s);
  const std::string host = running.batch_host();

  const double t0 = unix_now();
  REQUIRE(c->kill_node(host).ok());
  CHECK(c->job_pids(id).empty());
  auto down = c->wait_node_state(host, {"DOWN"}, 60s);
  REQUIRE(down.ok());
  const double down_at = unix_now();
  std::cout << "--- kill -9 of " << host << " (" << (requeue ? "--requeue" : "--no-requeue")
            << "): State=" << *down << " @+" << (down_at - t0)
            << "s (SlurmdTimeout=" << c->options().slurmd_timeout_s << ")\n";
  // Measured: about SlurmdTimeout + 2 x MessageTimeout (+ 1 s); 26 s with MessageTimeout=10.
  CHECK(down_at - t0 <= c->options().slurmd_timeout_s + 2 * c->options().message_timeout_s + 10);

  if (requeue) {
    const auto again = wait_state_or_fail(*c, id, {"RUNNING"}, 60s);
    const auto rerun = wait_event_after(log, "batch", "start", t0, 20s);
    std::cout << "job requeued and running again on " << again.batch_host() << " @+"
              << (rerun.time - t0) << "s, Restarts=" << again.restarts()
              << " SLURM_RESTART_COUNT=" << rerun.info.at("restart") << "\n";
    CHECK(again.batch_host() != host);
    CHECK(again.restarts() == 1);
    CHECK(rerun.info.at("restart") == "1");
  } else {
    const auto failed = wait_state_or_fail(*c, id, {"NODE_FAIL", "FAILED"}, 60s);
    std::cout << "job ended " << failed.state() << " Reason=" << failed.reason()
              << " ExitCode=" << failed.get("ExitCode") << "\n";
    CHECK(failed.state() == "NODE_FAIL");
  }
  // No signal reached the killed processes: the machine just vanished.
  const auto events = parse_signal_log(slurp(log));
  for (const auto& e : events)
    if (e.time >= t0 && e.time < down_at) CHECK(e.event == "start");

  // The node comes back by itself once its slurmd registers (ReturnToService=2).
  const double restart_at = unix_now();
  REQUIRE(c->restart_node(host).ok());
  auto idle = c->wait_node_state(host, {"IDLE", "MIXED", "ALLOCATED"}, 60s);
  INFO(c->ctld_log_tail());
  REQUIRE(idle.ok());
  std::cout << host << " back as " << *idle << " " << (unix_now() - restart_at)
            << " s after its slurmd restarted\n";
  REQUIRE(c->cancel_all_jobs().ok());
}

TEST_CASE("slurm: a drained node is resumed with scontrol update State=RESUME", "[integration]") {
  SG_SLURM_OR_SKIP();
  SlurmOptions options;
  options.nodes = 1;
  auto c = start_cluster(options);
  REQUIRE(c->run({"scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=health check"})
              ->exit_code == 0);
  auto drained = c->node("n1");
  REQUIRE(drained.ok());
  CHECK((*drained)["State"].find("DRAIN") != std::string::npos);
  // A job cannot start on the drained node...
  const auto id = submit_or_fail(*c, "#!/bin/bash\necho ran\n");
  std::this_thread::sleep_for(2s);
  CHECK(c->job(id)->state() == "PENDING");
  // ...until it is resumed.
  REQUIRE(c->resume_node("n1").ok());
  CHECK(c->wait_node_state("n1", {"IDLE", "ALLOCATED", "MIXED"}, 20s).ok());
  CHECK(wait_state_or_fail(*c, id, {"COMPLETED"}, 30s).state() == "COMPLETED");
}

TEST_CASE("slurm: a requeued job with its node in ExcNodeList runs on another node",
          "[integration]") {
  SG_SLURM_OR_SKIP();
  auto c = start_cluster(three_nodes());
  TempDir tmp;
  const std::string log = tmp / "signals.log";
  const auto id = submit_or_fail(*c, recorder_script({log, 0, ""}), {"--requeue"});
  const auto running = wait_state_or_fail(*c, id, {"RUNNING"}, 30s);
  wait_event(log, "batch", "start", 20s);
  const std::string host = running.batch_host();

  // While the job runs, ExcNodeList cannot be changed; once requeued (pending, held for
  // cred_expire) it can.
  auto early = c->run({"scontrol", "update", "JobId=" + std::to_string(id), "ExcNodeList=" + host});
  REQUIRE(early.ok());
  std::cout << "update ExcNodeList while RUNNING: exit " << early->exit_code << " " << early->err;
  const double t0 = unix_now();
  REQUIRE(c->run({"scontrol", "requeue", std::to_string(id)})->exit_code == 0);
  wait_state_or_fail(*c, id, {"PENDING"}, 30s);
  auto late = c->run({"scontrol", "update", "JobId=" + std::to_string(id), "ExcNodeList=" + host});
  REQUIRE(late.ok());
  INFO(late->err);
  CHECK(late->exit_code == 0);
  const auto again = wait_state_or_fail(*c, id, {"RUNNING"}, 60s);
  const auto rerun = wait_event_after(log, "batch", "start", t0, 20s);
  std::cout << "requeued with ExcNodeList=" << again.get("ExcNodeList") << ": ran on " << host
            << ", now on " << again.batch_host() << " @+" << (rerun.time - t0) << "s\n";
  CHECK(again.get("ExcNodeList") == host);
  CHECK(again.batch_host() != host);
  CHECK(again.restarts() == 1);
  CHECK(rerun.info.at("restart") == "1");
  if (early->exit_code == 0) WARN("ExcNodeList of a running job was accepted: " << early->out);
}
