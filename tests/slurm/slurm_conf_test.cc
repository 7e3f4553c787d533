// What the Slurm fixture writes and parses, without running Slurm: the conf holds every
// setting the scenario tests rely on, and `scontrol show -o` records and signal logs parse.
#include <catch2/catch.hpp>

#include "tests/support/signal_log.h"
#include "tests/support/slurm_cluster.h"

using namespace shardguard::testing;

namespace {

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

}  // namespace

TEST_CASE("slurm conf: the settings the scenarios rely on", "[unit]") {
  SlurmConfSpec spec;
  spec.options.nodes = 3;
  spec.options.grace_time_s = 7;
  spec.options.kill_wait_s = 4;
  spec.options.cred_expire_s = 6;
  spec.options.slurmd_timeout_s = 9;
  spec.dir = "/tmp/sg-slurm-abc";
  spec.cluster_name = "sg1x0";
  spec.munge_socket = "/tmp/sg-slurm-abc/munge/munge.sock";
  spec.ctld_port = 20000;
  spec.node_ports = {20001, 20002, 20003};

  SECTION("REQUEUE mode (default)") {
    const std::string conf = render_slurm_conf(spec);
    INFO(conf);
    for (const char* line :
         {"ClusterName=sg1x0", "SlurmctldHost=localhost", "SlurmctldPort=20000", "SlurmUser=root",
          "AuthInfo=socket=/tmp/sg-slurm-abc/munge/munge.sock,cred_expire=6",
          "StateSaveLocation=/tmp/sg-slurm-abc/state", "SlurmdSpoolDir=/tmp/sg-slurm-abc/spool-%n",
          "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SlurmdTimeout=9",
          "MessageTimeout=5", "ReturnToService=2", "KillWait=4", "JobRequeue=1",
          "PreemptType=preempt/partition_prio", "PreemptMode=REQUEUE"})
      CHECK(has_line(conf, line));
    CHECK(has_line(conf,
                   "NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=20002 CPUs=2 "
                   "RealMemory=1000 State=UNKNOWN"));
    CHECK(has_line(conf,
                   "PartitionName=low Nodes=n1,n2,n3 Default=YES MaxTime=INFINITE State=UP "
                   "PriorityTier=1 GraceTime=7"));
    CHECK(has_line(conf,
                   "PartitionName=high Nodes=n1,n2,n3 MaxTime=INFINITE State=UP PriorityTier=10 "
                   "PreemptMode=OFF"));
    CHECK(conf.find("cgroup") == std::string::npos);
    CHECK(conf.find("Gres") == std::string::npos);
  }
  SECTION("GPUs as a GRES: GresTypes, Gres= per node, a gres.conf line per node") {
    CHECK(render_gres_conf(spec).empty());
    spec.options.gpus_per_node = 3;
    const std::string conf = render_slurm_conf(spec);
    INFO(conf);
    CHECK(has_line(conf, "GresTypes=gpu"));
    CHECK(has_line(conf,
                   "NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=20002 CPUs=2 "
                   "RealMemory=1000 Gres=gpu:3 State=UNKNOWN"));
    const std::string gres = render_gres_conf(spec);
    CHECK(has_line(gres, "NodeName=n1 Name=gpu File=/tmp/sg-slurm-abc/gpus/n1/nvidia[0-2]"));
    CHECK(has_line(gres, "NodeName=n3 Name=gpu File=/tmp/sg-slurm-abc/gpus/n3/nvidia[0-2]"));
    spec.options.gpus_per_node = 1;
    CHECK(has_line(render_gres_conf(spec),
                   "NodeName=n1 Name=gpu File=/tmp/sg-slurm-abc/gpus/n1/nvidia0"));
  }
  SECTION("CANCEL mode, no preemption, extra lines") {
    spec.options.preempt_mode = "CANCEL";
    spec.options.extra_conf = {"RequeueExit=75"};
    std::string conf = render_slurm_conf(spec);
    CHECK(has_line(conf, "PreemptMode=CANCEL"));
    CHECK(has_line(conf, "RequeueExit=75"));
    spec.options.preempt_mode = "OFF";
    conf = render_slurm_conf(spec);
    CHECK(has_line(conf, "PreemptType=preempt/none"));
  }
}

TEST_CASE("slurm: scontrol -o records parse, values with spaces included", "[unit]") {
  const auto f = parse_scontrol_record(
      "JobId=12 JobName=train job UserId=root(0) JobState=PENDING Reason=BeginTime "
      "Restarts=1 ExitCode=0:15 NodeList=(null) ExcNodeList=n1");
  CHECK(f.at("JobId") == "12");
  CHECK(f.at("JobName") == "train job");
  CHECK(f.at("ExcNodeList") == "n1");
  SlurmJob j{f};
  CHECK(j.state() == "PENDING");
  CHECK(j.reason() == "BeginTime");
  CHECK(j.restarts() == 1);
  CHECK(j.exit_code() == std::pair<int, int>{0, 15});
  CHECK(j.get("Missing").empty());
}

TEST_CASE("signal logs parse with their start fields", "[unit]") {
  const auto log = parse_signal_log(
      "1700000000.100000 batch start pid=5 node=n1 restart=0\n"
      "1700000001.250000 step0 TERM\n"
      "garbage\n"
      "1700000001.260000 batch TERM\n");
  REQUIRE(log.size() == 3);
  CHECK(log[0].info.at("node") == "n1");
  CHECK(events_of(log, "batch") == std::vector<std::string>{"start", "TERM"});
  auto term = first_event(log, "step0", "TERM");
  REQUIRE(term);
  CHECK(term->time == Approx(1700000001.25));
  CHECK_FALSE(first_event(log, "step0", "KILL"));
}
