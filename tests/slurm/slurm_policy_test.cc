// The Slurm decisions (agent/slurm_policy.h) as a table: job state + what reached the job +
// how the run ended -> requeue or not, and why; parsing of `scontrol` records (some copied
// from what this machine's Slurm 22.05 printed), --signal specs and RequeueExit; and the
// scontrol adapter (agent/slurm_scontrol.h) over a recording fake runner.
#include "agent/slurm_policy.h"

#include <catch2/catch.hpp>
#include <csignal>
#include <map>

#include "agent/slurm_scontrol.h"

using namespace shardguard;
using namespace shardguard::agent;

namespace {

// Real records (Slurm 22.05.8 here): the first a preempted job in its GraceTime, the second
// right after a user's scancel, the third right after `scontrol requeue`.
const char* kPreempted =
    "JobId=1 JobName=script-1.sh UserId=root(0) GroupId=root(0) MCS_label=N/A "
    "Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=None "
    "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:04 "
    "TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-30T16:05:16 "
    "EligibleTime=2026-11-30T16:05:16 AccrueTime=2026-11-30T16:05:16 "
    "StartTime=2026-11-30T16:05:18 EndTime=Unknown Deadline=N/A "
    "PreemptEligibleTime=2026-11-30T16:05:18 PreemptTime=2026-11-30T16:05:21 SuspendTime=None "
    "SecsPreSuspend=0 LastSchedEval=2026-11-30T16:05:18 Scheduler=Main Partition=low "
    "AllocNode:Sid=localhost:1796 ReqNodeList=n1 ExcNodeList=(null) NodeList=n1 BatchHost=n1 "
    "NumNodes=1 NumCPUs=2 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=2,node=1,billing=2";
const char* kCancelled =
    "JobId=2 JobName=script-2.sh UserId=root(0) GroupId=root(0) MCS_label=N/A "
    "Priority=4294901758 Nice=0 Account=(null) QOS=(null) JobState=COMPLETING Reason=None "
    "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:15 "
    "RunTime=00:00:02 TimeLimit=UNLIMITED TimeMin=N/A StartTime=2026-11-30T16:07:18 "
    "EndTime=2026-11-30T16:07:20 Deadline=N/A PreemptEligibleTime=2026-11-30T16:07:18 "
    "PreemptTime=None SuspendTime=None SecsPreSuspend=0 Partition=low ReqNodeList=(null) "
    "ExcNodeList=(null) NodeList=n1 BatchHost=n1";
const char* kRequeued =
    "JobId=3 JobName=script-3.sh UserId=root(0) GroupId=root(0) JobState=COMPLETING "
    "Reason=None Dependency=(null) Requeue=1 Restarts=1 BatchFlag=1 Reboot=0 ExitCode=0:0 "
    "RunTime=00:00:00 TimeLimit=UNLIMITED StartTime=2026-11-30T16:07:33 EndTime=Unknown "
    "Deadline=N/A SuspendTime=None SecsPreSuspend=0 Partition=low ExcNodeList=n3 NodeList=n1 "
    "BatchHost=n1";

SlurmJobState job(std::string state, std::string reason = "None", uint32_t restarts = 0,
                  bool preempting = false, bool requeueable = true) {
  SlurmJobState j;
  j.job_id = 42;
  j.state = std::move(state);
  j.reason = std::move(reason);
  j.restarts = restarts;
  j.preempting = preempting;
  j.requeueable = requeueable;
  j.partition = "low";
  j.batch_host = "n1";
  return j;
}

struct Row {
  const char* name;
  SlurmRunOutcome outcome;
  SlurmCase what;
  bool requeue;
  std::string exclude;
  const char* why_contains;
};

SlurmRunOutcome stopped(std::vector<SlurmStopSeen> stops, std::optional<SlurmJobState> end,
                        uint32_t restarts_at_start = 0) {
  SlurmRunOutcome o;
  o.exit_code = 75;
  o.restarts_at_start = restarts_at_start;
  o.stops = std::move(stops);
  o.at_end = std::move(end);
  return o;
}

template <typename F>
SlurmRunOutcome with(SlurmRunOutcome o, F f) {
  f(o);
  return o;
}

}  // namespace

TEST_CASE("slurm policy: the requeue table", "[unit]") {
  const auto running = job("RUNNING");
  const auto lead = stopped({{"sigusr1", running}}, running);
  const auto term_timeout = job("COMPLETING", "TimeLimit");
  const auto preempted = job("RUNNING", "None", 0, true);
  const auto row = GENERATE_COPY(values<Row>({
      {"--signal before the time limit", lead, SlurmCase::kSignalLead, true, "", "--signal"},
      {"--signal, but --no-requeue",
       stopped({{"sigusr1", job("RUNNING", "None", 0, false, false)}},
               job("RUNNING", "None", 0, false, false)),
       SlurmCase::kSignalLead, false, "", "not requeueable"},
      {"--signal with RequeueExit=75", with(lead, [](auto& o) { o.slurm_requeues_exit_75 = true; }),
       SlurmCase::kSignalLead, false, "", "RequeueExit=75"},
      {"--signal on a node of a multi-node job that does not run the coordinator",
       with(lead, [](auto& o) { o.is_requeuer = false; }), SlurmCase::kOtherNode, false, "",
       "once for the job"},
      {"that node read nothing (only the coordinator's node reads the job's state)",
       with(SlurmRunOutcome{},
            [](auto& o) {
              o.exit_code = 75;
              o.is_requeuer = false;
            }),
       SlurmCase::kOtherNode, false, "", "first node"},
      {"scancel --signal=USR1 --batch (forwarded by the batch shell)", lead, SlurmCase::kSignalLead,
       true, "", "requeued"},
      {"scancel", stopped({{"sigterm", job("COMPLETING")}}, job("COMPLETING")),
       SlurmCase::kCancelled, false, "", "CANCELLED"},
      {"scancel during the emergency of a --signal",
       stopped({{"sigusr1", running}, {"sigterm", job("COMPLETING")}}, job("COMPLETING")),
       SlurmCase::kCancelled, false, "", "scancel"},
      {"scancel, the read at the signal failed",
       stopped({{"sigterm", std::nullopt}}, job("COMPLETING")), SlurmCase::kCancelled, false, "",
       "scancel"},
      {"scancel seen only after the run ended (ranks' SIGTERM)", stopped({}, job("CANCELLED")),
       SlurmCase::kCancelled, false, "", "scancel"},
      {"scontrol requeue by a person",
       stopped({{"sigterm", job("COMPLETING", "None", 1)}}, job("PENDING", "BeginTime", 1)),
       SlurmCase::kRequeuedBySlurm, false, "", "never twice"},
      {"scancel of a job that ran once before",
       stopped({{"sigterm", job("COMPLETING", "None", 1)}}, job("COMPLETING", "None", 1), 1),
       SlurmCase::kCancelled, false, "", "scancel"},
      {"scontrol requeue of a job that ran once before",
       stopped({{"sigterm", job("COMPLETING", "None", 2)}}, job("COMPLETING", "None", 2), 1),
       SlurmCase::kRequeuedBySlurm, false, "", "never twice"},
      {"time limit without --signal", stopped({{"sigterm", term_timeout}}, term_timeout),
       SlurmCase::kTimeLimit, true, "", "time limit"},
      {"time limit after a --signal",
       stopped({{"sigusr1", running}, {"sigterm", term_timeout}}, term_timeout),
       SlurmCase::kTimeLimit, true, "", "time limit"},
      {"preemption (REQUEUE or CANCEL mode), within GraceTime",
       stopped({{"sigterm", preempted}}, preempted), SlurmCase::kPreempted, true, "", "GraceTime"},
      {"preemption, REQUEUE mode, Slurm requeued it when the grace ended",
       stopped({{"sigterm", preempted}}, job("COMPLETING", "None", 1, false)),
       SlurmCase::kRequeuedBySlurm, false, "", "never twice"},
      {"preemption with RequeueExit=75",
       with(stopped({{"sigterm", preempted}}, preempted),
            [](auto& o) { o.slurm_requeues_exit_75 = true; }),
       SlurmCase::kPreempted, false, "", "RequeueExit"},
      {"a node failed a health check",
       with(stopped({{"node-unhealthy", running}}, running),
            [](auto& o) { o.unhealthy_node = "n1"; }),
       SlurmCase::kUnhealthy, true, "n1", "without node n1"},
      {"a failed health check with RequeueExit=75 still excludes the node",
       with(stopped({{"node-unhealthy", running}}, running),
            [](auto& o) {
              o.unhealthy_node = "n1";
              o.slurm_requeues_exit_75 = true;
            }),
       SlurmCase::kUnhealthy, true, "n1", "without node n1"},
      {"a failed health check while a person requeued it: only ExcNodeList",
       with(stopped({{"node-unhealthy", running}}, job("PENDING", "BeginTime", 1)),
            [](auto& o) { o.unhealthy_node = "n1"; }),
       SlurmCase::kRequeuedBySlurm, false, "n1", "never twice"},
      {"an operator's drain", stopped({{"drain: maintenance", running}}, running),
       SlurmCase::kDrain, false, "", "drain"},
      {"SIGINT from a person", stopped({{"sigint", running}}, running), SlurmCase::kInterrupted,
       false, "", "SIGINT"},
      {"SIGTERM while the job runs, not from Slurm", stopped({{"sigterm", running}}, running),
       SlurmCase::kUnexplainedTerm, true, "", "SIGTERM"},
      {"a cloud's spot notice", stopped({{"aws-spot-interruption", running}}, running),
       SlurmCase::kMachineNotice, true, "", "going away"},
      {"the ranks exited 75 by themselves", stopped({}, running), SlurmCase::kNoNotice, true, "",
       "by themselves"},
      {"the job's state could not be read", stopped({{"sigterm", std::nullopt}}, std::nullopt),
       SlurmCase::kUnknown, false, "", "could not be read"},
      {"the run finished", with(lead, [](auto& o) { o.exit_code = 0; }), SlurmCase::kNotStopped,
       false, "", "exit 0"},
      {"requeue will not help (78)", with(lead, [](auto& o) { o.exit_code = 78; }),
       SlurmCase::kNotStopped, false, "", "exit 78"},
  }));
  INFO(row.name);
  const auto d = decide_slurm_requeue(row.outcome);
  INFO(d.why);
  CHECK(slurm_case_name(d.what) == slurm_case_name(row.what));
  CHECK(d.requeue == row.requeue);
  CHECK(d.exclude_node == row.exclude);
  CHECK_THAT(d.why, Catch::Contains(row.why_contains));
}

TEST_CASE("slurm policy: scontrol show job records", "[unit]") {
  auto p = parse_slurm_job(kPreempted);
  REQUIRE(p.ok());
  CHECK(p->job_id == 1);
  CHECK(p->state == "RUNNING");
  CHECK(p->reason == "None");
  CHECK(p->requeueable);
  CHECK(p->restarts == 0);
  CHECK(p->preempting);
  CHECK(p->partition == "low");
  CHECK(p->exc_nodes.empty());
  CHECK(p->batch_host == "n1");
  auto c = parse_slurm_job(kCancelled);
  REQUIRE(c.ok());
  CHECK(c->state == "COMPLETING");
  CHECK_FALSE(c->preempting);
  auto r = parse_slurm_job(kRequeued);
  REQUIRE(r.ok());
  CHECK(r->restarts == 1);
  CHECK(r->exc_nodes == "n3");
  CHECK_FALSE(parse_slurm_job("JobName=x JobState=RUNNING").ok());
  auto no_state = parse_slurm_job("JobId=9 JobName=x");
  REQUIRE_FALSE(no_state.ok());
  CHECK_THAT(no_state.error().message(), Catch::Contains("no JobState"));
  CHECK(parse_slurm_job("JobId=9 JobState=PENDING Requeue=0")->requeueable == false);
}

TEST_CASE("slurm policy: --signal specs, RequeueExit, ExcNodeList", "[unit]") {
  struct Spec {
    const char* text;
    int signal;
    bool batch;
    int lead;
  };
  const auto s = GENERATE(values<Spec>({{"B:USR1@90", SIGUSR1, true, 90},
                                        {"USR1", SIGUSR1, false, 60},
                                        {"SIGUSR2@5", SIGUSR2, false, 5},
                                        {"10@30", 10, false, 30},
                                        {"RB:TERM@120", SIGTERM, true, 120},
                                        {"R:USR1@0", SIGUSR1, false, 0}}));
  auto p = parse_slurm_signal_spec(s.text);
  REQUIRE(p.ok());
  CHECK(p->signal == s.signal);
  CHECK(p->batch_only == s.batch);
  CHECK(p->lead.count() == s.lead);
  for (const char* bad : {"X:USR1", "USR1@abc", "KILL", ":USR1", "USR1@99999", ""}) {
    INFO(bad);
    auto e = parse_slurm_signal_spec(bad);
    REQUIRE_FALSE(e.ok());
    CHECK_THAT(e.error().message(), Catch::Contains("--signal"));
  }

  CHECK(slurm_requeue_exit_lists("MinJobAge = 600 sec\nRequeueExit             = 75\n", 75));
  CHECK(slurm_requeue_exit_lists("RequeueExit = 1,70-79\n", 75));
  CHECK_FALSE(slurm_requeue_exit_lists("RequeueExit = 1,76\n", 75));
  CHECK_FALSE(
      slurm_requeue_exit_lists("RequeueExit             = (null)\n"
                               "RequeueExitHold         = 75\n",
                               75));

  CHECK(add_excluded_node("", "n1") == "n1");
  CHECK(add_excluded_node("n2", "n1") == "n2,n1");
  CHECK(add_excluded_node("n2,n1", "n1") == "n2,n1");
}

TEST_CASE("slurm policy: the job's environment", "[unit]") {
  CHECK_FALSE(read_slurm_job_env({{"HOME", "/root"}})->has_value());
  CHECK_FALSE(
      read_slurm_job_env({{"SLURM_JOB_ID", "7"}, {"SHARDGUARD_SLURM", "off"}})->has_value());
  auto e = read_slurm_job_env({{"SLURM_JOB_ID", "7"},
                               {"SLURM_RESTART_COUNT", "2"},
                               {"SLURM_PROCID", "0"},
                               {"SLURM_NODEID", "1"},
                               {"SLURM_JOB_NODELIST", "n[1-2]"},
                               {"SLURMD_NODENAME", "n2"},
                               {"SLURM_JOB_PARTITION", "low"},
                               {"SBATCH_SIGNAL", "B:USR2@90"}});
  REQUIRE(e.ok());
  REQUIRE(e->has_value());
  CHECK((*e)->job_id == 7);
  CHECK((*e)->restart_count == 2);
  CHECK((*e)->procid == 0u);
  CHECK((*e)->node_id == 1u);
  CHECK((*e)->job_nodes == "n[1-2]");
  CHECK((*e)->node == "n2");
  CHECK((*e)->partition == "low");
  REQUIRE((*e)->signal);
  CHECK((*e)->signal->signal == SIGUSR2);
  auto first = read_slurm_job_env({{"SLURM_JOB_ID", "8"}});
  REQUIRE(first.ok());
  CHECK((*first)->restart_count == 0);
  CHECK_FALSE((*first)->procid.has_value());
  CHECK_FALSE((*first)->node_id.has_value());
  for (const auto& [k, v] :
       std::vector<std::pair<std::string, std::string>>{{"SLURM_JOB_ID", "x"},
                                                        {"SLURM_RESTART_COUNT", "-1"},
                                                        {"SLURM_NODEID", "first"},
                                                        {"SBATCH_SIGNAL", "B:"},
                                                        {"SHARDGUARD_SLURM", "maybe"}}) {
    EnvMap env{{"SLURM_JOB_ID", "9"}};
    env[k] = v;
    auto bad = read_slurm_job_env(env);
    INFO(k << "=" << v);
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(bad.error().message(), Catch::Contains(k == "SBATCH_SIGNAL" ? "--signal" : k));
  }
}

namespace {

// Answers by the command line; records every call.
struct FakeRunner {
  std::map<std::string, CommandOutput> answers;
  std::vector<std::string> calls;
  CommandRunner fn() {
    return [this](const std::vector<std::string>& argv, Duration) -> Result<CommandOutput> {
      std::string line;
      for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
      calls.push_back(line);
      auto it = answers.find(line);
      if (it == answers.end()) return Error(ErrorCode::kNotFound, "run 'scontrol': not here");
      return it->second;
    };
  }
};

}  // namespace

TEST_CASE("slurm scontrol adapter: the commands it runs and what it makes of the answers",
          "[unit]") {
  FakeRunner f;
  f.answers["scontrol show job -o 1"] = {0, std::string(kPreempted) + "\n", ""};
  f.answers["scontrol show config"] = {0, "AccountingStorageType = none\nRequeueExit = 75\n", ""};
  f.answers["scontrol requeue 1"] = {0, "", ""};
  f.answers["scontrol requeue 2"] = {1, "", "Job is pending execution for job 2\n"};
  f.answers["scontrol update JobId=1 ExcNodeList=n3,n1"] = {0, "", ""};
  f.answers["scontrol show hostnames n[1-2]"] = {0, "n1\nn2\n", ""};
  Scontrol s(f.fn());
  auto j = s.show_job(1);
  REQUIRE(j.ok());
  CHECK(j->preempting);
  CHECK(*s.requeue_exit_lists(75));
  CHECK(s.requeue(1).ok());
  auto again = s.requeue(2);
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().message() ==
        "scontrol requeue 2: exit 1: Job is pending execution for job 2");
  CHECK(s.set_excluded_nodes(1, add_excluded_node("n3", "n1")).ok());
  auto hosts = s.hostnames_function()("n[1-2]");
  REQUIRE(hosts.ok());
  CHECK(*hosts == std::vector<std::string>{"n1", "n2"});
  auto missing = s.show_job(7);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error().message(), Catch::Contains("scontrol show job -o 7"));
  CHECK(f.calls.size() == 7);
}

TEST_CASE("slurm command runner: output, exit codes, timeouts, a missing program", "[unit]") {
  auto ok = run_command_blocking({"sh", "-c", "echo out; echo err >&2; exit 3"},
                                 std::chrono::seconds(10));
  REQUIRE(ok.ok());
  CHECK(ok->exit_code == 3);
  CHECK(ok->out == "out\n");
  CHECK(ok->err == "err\n");
  const auto t0 = std::chrono::steady_clock::now();
  auto slow = run_command_blocking({"sleep", "10"}, std::chrono::milliseconds(200));
  REQUIRE_FALSE(slow.ok());
  CHECK(slow.error().code() == ErrorCode::kTimeout);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  auto missing = run_command_blocking({"no-such-program-sg"}, std::chrono::seconds(5));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code() == ErrorCode::kNotFound);
  // SIGTERM does not end it (Slurm signals every process of the job, this one too); other
  // signals keep their default action even where this process ignores them.
  auto survives =
      run_command_blocking({"sh", "-c", "kill -TERM $$; echo alive"}, std::chrono::seconds(10));
  REQUIRE(survives.ok());
  CHECK(survives->exit_code == 0);
  CHECK(survives->out == "alive\n");
  auto previous = std::signal(SIGUSR2, SIG_IGN);
  auto killed =
      run_command_blocking({"sh", "-c", "kill -USR2 $$; sleep 5"}, std::chrono::seconds(10));
  std::signal(SIGUSR2, previous);
  REQUIRE(killed.ok());
  CHECK(killed->exit_code == 128 + SIGUSR2);
}
