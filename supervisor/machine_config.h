// The decision core's settings from the job's configuration. Pure.
#pragma once

#include "supervisor/attempt_machine.h"
#include "supervisor/job_config.h"

namespace shardguard::supervisor {

MachineConfig machine_config(const JobConfig& config);

}  // namespace shardguard::supervisor
