// cli/slurm_integration.h with scontrol faked (recorded answers): who reads the job's state and
// who requeues in a multi-node job. The node that runs the coordinator decides for the whole
// job, the other nodes run no scontrol at all; a node that takes over from the coordinator
// decides from then on; an unhealthy node is named by its SLURM_NODEID in SLURM_JOB_NODELIST.
#include "cli/slurm_integration.h"

#include <signal.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/random.h"
#include "io/event_loop.h"
#include "io/http_client.h"
#include "io/process.h"
#include "supervisor/event_log.h"
#include "tests/support/manual_worker.h"
#include "tests/support/temp_dir.h"

using namespace shardguard;
using namespace std::chrono_literals;
using shardguard::cli::SlurmIntegration;
using shardguard::cli::SlurmRole;
using shardguard::testing::ManualWorker;
using shardguard::testing::TempDir;

namespace {

// scontrol as a 2-node job sees it: job 7 running, requeueable, on n[1-2].
struct FakeScontrol {
  std::shared_ptr<std::vector<std::string>> calls = std::make_shared<std::vector<std::string>>();

  agent::CommandRunner runner() const {
    auto log = calls;
    return [log](const std::vector<std::string>& argv, Duration) -> Result<agent::CommandOutput> {
      std::string line;
      for (size_t i = 1; i < argv.size(); ++i) line += (i > 1 ? " " : "") + argv[i];
      log->push_back(line);
      agent::CommandOutput o;
      o.exit_code = 0;
      if (line == "show job -o 7")
        o.out =
            "JobId=7 JobName=train JobState=RUNNING Reason=None Requeue=1 Restarts=0 "
            "PreemptTime=None Partition=low ExcNodeList=(null) BatchHost=n1\n";
      else if (line == "show config")
        o.out = "RequeueExit = (null)\n";
      else if (line == "show hostnames n[1-2]")
        o.out = "n1\nn2\n";
      return o;
    };
  }
};

struct Rig {
  TempDir dir;
  io::EventLoop loop;
  FakeClock clock;
  io::PosixProcessLauncher launcher{loop};
  io::BeastHttpClient http{loop};
  SeededRandom random{7};
  ManualWorker worker{loop};
  io::Deps deps{loop, clock, clock, PosixFilesystem::instance(), launcher, http, random, worker};
  supervisor::JobConfig config;
  FakeScontrol scontrol;

  Rig() { config.run_dir = dir / "run"; }

  std::unique_ptr<SlurmIntegration> attach(SlurmRole role, const std::string& node_id,
                                           const std::string& node_name) {
    const agent::EnvMap env = {{"SLURM_JOB_ID", "7"},
                               {"SLURM_NODEID", node_id},
                               {"SLURMD_NODENAME", node_name},
                               {"SLURM_PROCID", node_id},
                               {"SLURM_JOB_NODELIST", "n[1-2]"},
                               {"SLURM_JOB_PARTITION", "low"}};
    return SlurmIntegration::attach(deps, config, role, env, scontrol.runner());
  }
  // The reads the notices started (on the worker), and their completions (on the loop).
  void settle() {
    for (int i = 0; i < 5; ++i) {
      worker.run_all();
      loop.run_for(10ms);
    }
  }
  std::vector<supervisor::EventRecord> named(const std::string& type) const {
    std::vector<supervisor::EventRecord> out;
    auto all = supervisor::read_events(config.run_dir + "/events.jsonl");
    if (all.ok())
      for (auto& e : *all)
        if (e.type == type) out.push_back(e);
    return out;
  }
  std::string field(const supervisor::EventRecord& e, const std::string& key) const {
    for (const auto& [k, v] : e.fields)
      if (k == key) return v;
    return "";
  }
};

}  // namespace

TEST_CASE("slurm integration: a node that does not run the coordinator runs no scontrol",
          "[unit]") {
  Rig rig;
  auto slurm = rig.attach(SlurmRole::kFollows, "1", "n2");
  REQUIRE(slurm->active());
  // Its notices never reach it from a decision core; called anyway, it reads nothing.
  slurm->observe("preempt_notice", {{"reason", "sigterm"}});
  rig.settle();
  CHECK(slurm->finish(75) == 75);
  CHECK(rig.scontrol.calls->empty());
  const auto decision = rig.named("slurm_decision");
  REQUIRE(decision.size() == 1);
  CHECK(rig.field(decision[0], "case") == "other-node");
  CHECK(rig.field(decision[0], "requeue") == "false");
  CHECK(rig.field(rig.named("slurm_job").at(0), "decides") == "false");
  // It still takes the job's signal as a notice, as every node must.
  CHECK(std::find(rig.config.agent.notice_signals.begin(), rig.config.agent.notice_signals.end(),
                  SIGUSR1) != rig.config.agent.notice_signals.end());
}

TEST_CASE("slurm integration: the coordinator's node reads once per burst and requeues the job",
          "[unit]") {
  Rig rig;
  auto slurm = rig.attach(SlurmRole::kDecides, "0", "n1");
  // Node 0's SIGUSR1 and node 1's, relayed by the coordinator: one read serves the second.
  slurm->observe("preempt_notice", {{"reason", "sigusr1"}});
  slurm->observe("preempt_notice", {{"reason", "sigusr1"}});
  rig.settle();
  CHECK(slurm->finish(75) == 75);
  CHECK(*rig.scontrol.calls == std::vector<std::string>{"show job -o 7", "show job -o 7",
                                                        "show job -o 7", "show config",
                                                        "requeue 7"});
  const auto decision = rig.named("slurm_decision");
  REQUIRE(decision.size() == 1);
  CHECK(rig.field(decision[0], "case") == "signal-lead");
  CHECK(rig.field(decision[0], "requeue") == "true");
}

TEST_CASE("slurm integration: another node failed its health check -> requeued without that node",
          "[unit]") {
  Rig rig;
  auto slurm = rig.attach(SlurmRole::kDecides, "0", "n1");
  // The coordinator's hook names node 1: SLURM_NODEID 1, the second host of n[1-2].
  slurm->observe("node_unhealthy", {{"node", "1"}, {"evidence", "xid 79"}});
  rig.settle();
  CHECK(slurm->finish(75) == 75);
  const auto decision = rig.named("slurm_decision");
  REQUIRE(decision.size() == 1);
  CHECK(rig.field(decision[0], "case") == "node-unhealthy");
  CHECK(rig.field(decision[0], "exclude_node") == "n2");
  const auto& calls = *rig.scontrol.calls;
  CHECK(std::find(calls.begin(), calls.end(), "show hostnames n[1-2]") != calls.end());
  REQUIRE(!calls.empty());
  CHECK(calls.back() == "update JobId=7 ExcNodeList=n2");
}

TEST_CASE("slurm integration: a node that took over from the coordinator decides from then on",
          "[unit]") {
  Rig rig;
  auto slurm = rig.attach(SlurmRole::kFollows, "1", "n2");
  slurm->take_decisions();
  slurm->observe("preempt_notice", {{"reason", "sigterm"}});
  rig.settle();
  CHECK(slurm->finish(75) == 75);
  const auto decision = rig.named("slurm_decision");
  REQUIRE(decision.size() == 1);
  // RUNNING, no preemption, no time limit: a SIGTERM from outside Slurm's scheduling.
  CHECK(rig.field(decision[0], "case") == "sigterm");
  CHECK(rig.scontrol.calls->back() == "requeue 7");
}
