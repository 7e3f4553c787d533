// Builds a HealthMonitor with the checks HealthSettings enables, wired to the real seams
// given (production: the agent's loop, RealClock, AsioTimerFactory, PosixFilesystem,
// PosixProcessLauncher). Thread-safety: call on the loop thread.
#pragma once

#include <memory>

#include "agent/backoff.h"
#include "agent/health/health_config.h"
#include "agent/health/health_monitor.h"
#include "core/clock.h"
#include "core/filesystem.h"

namespace shardguard::io {
class EventLoop;
class ProcessLauncher;
}  // namespace shardguard::io

namespace shardguard::agent {

struct HealthEnv {
  io::EventLoop& loop;
  const Clock& clock;
  TimerFactory& timers;
  Filesystem& fs;
  io::ProcessLauncher& launcher;
  RandomFn random;  // interval jitter
};

// The monitor with one check per enabled setting ("gpu", "xid", "disk", "memory",
// "command:<name>"), not started. Everything in `env` must outlive it. With
// settings.enabled false the monitor has no checks.
std::unique_ptr<HealthMonitor> make_health_monitor(const HealthSettings& settings, HealthEnv env);

}  // namespace shardguard::agent
