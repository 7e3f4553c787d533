#include "agent/health/health_setup.h"

#include <algorithm>

#include "agent/health/command_check.h"
#include "agent/health/disk_check.h"
#include "agent/health/gpu_check.h"
#include "agent/health/kernel_log.h"
#include "agent/health/memory_check.h"
#include "agent/health/xid_check.h"

namespace shardguard::agent {

std::unique_ptr<HealthMonitor> make_health_monitor(const HealthSettings& s, const io::Deps& env) {
  auto monitor = std::make_unique<HealthMonitor>(env.clock, env.timers, env.random.as_function());
  if (!s.enabled) return monitor;
  if (s.gpu) {
    monitor->add(std::make_unique<GpuCheck>(GpuCheckConfig{s.nvml_library, s.expected_gpus}),
                 s.gpu_policy);
  }
  if (s.xid) {
    auto reader = s.kernel_log.empty()
                      ? make_kmsg_reader("/dev/kmsg", s.kernel_log_from_start)
                      : make_file_log_reader(s.kernel_log, s.kernel_log_from_start);
    monitor->add(std::make_unique<XidCheck>(XidCheckConfig{s.xid_extra_fatal, s.xid_extra_ignored},
                                            std::move(reader), env.clock),
                 s.xid_policy);
  }
  if (s.disk) {
    DiskCheckConfig c;
    c.path = s.checkpoint_dir;
    c.warning_bytes = s.disk_warning_bytes;
    c.fatal_bytes = s.disk_fatal_bytes;
    c.checkpoint_size = s.checkpoint_size_estimate;
    c.headroom = s.checkpoint_headroom;
    monitor->add(std::make_unique<DiskCheck>(c, env.fs), s.disk_policy);
  }
  if (s.memory) {
    MemoryCheckConfig c;
    c.meminfo_path = s.meminfo_path;
    c.psi_path = s.memory_psi_path;
    c.min_available_fraction = s.memory_available_fraction;
    c.max_psi_some_avg10 = s.memory_psi_some_avg10;
    monitor->add(std::make_unique<MemoryCheck>(c, env.fs), s.memory_policy);
  }
  for (const CommandCheckSettings& cmd : s.commands) {
    CheckPolicy policy = cmd.policy;
    // The command's own timeout (and kill) answers first; the monitor's is a backstop.
    policy.timeout =
        std::max(policy.timeout, cmd.timeout + cmd.kill_grace + std::chrono::seconds(15));
    monitor->add(std::make_unique<CommandCheck>(cmd, env.loop, env.launcher, env.timers), policy);
  }
  return monitor;
}

}  // namespace shardguard::agent
