// The slurm.conf of the test cluster, and parsing of `scontrol show -o` records.
#include <cstdlib>
#include <sstream>

#include "tests/support/slurm_cluster.h"

namespace shardguard::testing {

std::string render_slurm_conf(const SlurmConfSpec& spec) {
  const SlurmOptions& o = spec.options;
  const std::string& d = spec.dir;
  std::ostringstream c;
  c << "# Written by tests/support/slurm_cluster for one test run; removed with " << d << "\n"
    << "ClusterName=" << spec.cluster_name << "\n"
    << "SlurmctldHost=localhost\n"
    << "SlurmctldPort=" << spec.ctld_port
    << "\n"
    // The default slurmd port: unused (every node has its own Port), but it must not clash.
    << "SlurmdPort=" << (spec.node_ports.empty() ? spec.ctld_port + 1 : spec.node_ports[0]) << "\n"
    << "SlurmUser=root\nSlurmdUser=root\n"
    << "AuthType=auth/munge\nCredType=cred/munge\n"
    // Our own munged; a requeued job is held cred_expire seconds (120 by default).
    << "AuthInfo=socket=" << spec.munge_socket << ",cred_expire=" << o.cred_expire_s << "\n"
    << "StateSaveLocation=" << d << "/state\n"
    << "SlurmdSpoolDir=" << d << "/spool-%n\n"
    << "SlurmctldPidFile=" << d << "/slurmctld.pid\n"
    << "SlurmdPidFile=" << d << "/slurmd-%n.pid\n"
    << "SlurmctldLogFile=" << d << "/log/slurmctld.log\n"
    << "SlurmdLogFile=" << d << "/log/slurmd-%n.log\n"
    << "SlurmctldDebug=info\nSlurmdDebug=info\n"
    << "MailProg=/bin/true\n"
    // No cgroups: the process tracker follows parent pids (or process groups).
    << "ProctrackType=" << o.proctrack << "\n"
    << "TaskPlugin=task/none\n"
    << "JobAcctGatherType=jobacct_gather/none\n"
    << "AccountingStorageType=accounting_storage/none\n"
    << "JobCompType=jobcomp/none\n"
    << "MpiDefault=none\nSwitchType=switch/none\n"
    << "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n"
    // Several slurmd on one host with CPUs that need not match the cores.
    << "SlurmdParameters=config_overrides\n"
    // FIFO, and the main loop every second (60 s by default) so that a requeued job whose
    // hold ended starts at once.
    << "SchedulerType=sched/builtin\n"
    << "SchedulerParameters=sched_interval=1,batch_sched_delay=0\n"
    << "SlurmdTimeout=" << o.slurmd_timeout_s
    << "\n"
    // RPC retries to a dead slurmd take about 2 x MessageTimeout: a killed node is marked
    // DOWN after about SlurmdTimeout + 2 x MessageTimeout (26 s with the default 10).
    << "MessageTimeout=" << o.message_timeout_s << "\n"
    << "ReturnToService=2\n"
    << "KillWait=" << o.kill_wait_s << "\n"
    << "JobRequeue=1\n"
    << "MinJobAge=600\n";
  if (o.preempt_mode == "OFF") {
    c << "PreemptType=preempt/none\nPreemptMode=OFF\n";
  } else {
    c << "PreemptType=preempt/partition_prio\nPreemptMode=" << o.preempt_mode << "\n";
  }
  if (o.gpus_per_node > 0) c << "GresTypes=gpu\n";
  const std::string gres =
      o.gpus_per_node > 0 ? " Gres=gpu:" + std::to_string(o.gpus_per_node) : std::string();
  std::string all_nodes;
  for (size_t i = 0; i < spec.node_ports.size(); ++i) {
    const std::string name = "n" + std::to_string(i + 1);
    c << "NodeName=" << name
      << " NodeHostname=localhost NodeAddr=127.0.0.1 Port=" << spec.node_ports[i]
      << " CPUs=" << o.cpus_per_node << " RealMemory=" << o.real_memory_mb << gres
      << " State=UNKNOWN\n";
    all_nodes += (i ? "," : "") + name;
  }
  c << "PartitionName=" << kSlurmLowPartition << " Nodes=" << all_nodes
    << " Default=YES MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=" << o.grace_time_s << "\n"
    << "PartitionName=" << kSlurmHighPartition << " Nodes=" << all_nodes
    << " MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF\n";
  for (const auto& line : o.extra_conf) c << line << "\n";
  return c.str();
}

std::string render_gres_conf(const SlurmConfSpec& spec) {
  const int gpus = spec.options.gpus_per_node;
  if (gpus <= 0) return "";
  std::ostringstream c;
  for (size_t i = 0; i < spec.node_ports.size(); ++i) {
    const std::string name = "n" + std::to_string(i + 1);
    c << "NodeName=" << name << " Name=gpu File=" << spec.dir << "/gpus/" << name << "/nvidia"
      << (gpus == 1 ? "0" : "[0-" + std::to_string(gpus - 1) + "]") << "\n";
  }
  return c.str();
}

std::map<std::string, std::string> parse_scontrol_record(const std::string& line) {
  std::map<std::string, std::string> fields;
  std::istringstream in(line);
  std::string token, last_key;
  while (in >> token) {
    const auto eq = token.find('=');
    if (eq == std::string::npos || eq == 0) {
      if (!last_key.empty()) fields[last_key] += " " + token;
      continue;
    }
    last_key = token.substr(0, eq);
    fields[last_key] = token.substr(eq + 1);
  }
  return fields;
}

std::string SlurmJob::get(const std::string& key) const {
  auto it = fields.find(key);
  return it == fields.end() ? std::string() : it->second;
}

int SlurmJob::restarts() const { return std::atoi(get("Restarts").c_str()); }

std::pair<int, int> SlurmJob::exit_code() const {
  const std::string v = get("ExitCode");
  const auto colon = v.find(':');
  if (colon == std::string::npos) return {std::atoi(v.c_str()), 0};
  return {std::atoi(v.substr(0, colon).c_str()), std::atoi(v.substr(colon + 1).c_str())};
}

}  // namespace shardguard::testing
