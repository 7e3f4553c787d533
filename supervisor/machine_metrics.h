// The decision core's counters as Prometheus text (restarts by class, attempt, last committed
// step, lost steps, checkpoint time, nodes, world size, running time). The goodput metrics come
// from the timeline (supervisor/timeline.h). Pure; thread-safe.
#pragma once

#include <string>

#include "supervisor/attempt_machine.h"

namespace shardguard::supervisor {

std::string machine_metrics(const MachineStats& stats);

}  // namespace shardguard::supervisor
