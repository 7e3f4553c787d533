// Builds a HealthMonitor with the checks HealthSettings enables, wired to the dependency
// bundle given (io/deps.h). Thread-safety: call on the loop thread.
#pragma once

#include <memory>

#include "agent/backoff.h"
#include "agent/health/health_config.h"
#include "agent/health/health_monitor.h"
#include "io/deps.h"

namespace shardguard::agent {

// The monitor with one check per enabled setting ("gpu", "xid", "disk", "memory",
// "command:<name>"), not started. Everything in `deps` must outlive it (its random source
// jitters the intervals). With settings.enabled false the monitor has no checks.
std::unique_ptr<HealthMonitor> make_health_monitor(const HealthSettings& settings,
                                                   const io::Deps& deps);

}  // namespace shardguard::agent
