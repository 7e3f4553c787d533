#include "sim/goodput_ledger.h"

#include <algorithm>

namespace shardguard::sim {

using policies::Badput;

void GoodputLedger::add(Activity activity, double seconds, uint32_t used_gpus, uint32_t held_gpus) {
  if (seconds <= 0) return;
  const uint32_t held = std::max(used_gpus, held_gpus);
  switch (activity) {
    case Activity::kTraining:
      acc_.training(seconds, used_gpus);
      break;
    case Activity::kCheckpoint:
      acc_.badput(Badput::kCheckpoint, seconds, used_gpus);
      break;
    case Activity::kRestart:
      acc_.badput(Badput::kRestart, seconds, held);
      return;
    case Activity::kWaiting:
      acc_.badput(Badput::kWaiting, seconds, held);
      return;
  }
  acc_.badput(Badput::kWaiting, seconds, held - used_gpus);
}

void GoodputLedger::lose(double step_seconds, uint32_t job_gpus) {
  acc_.lose(step_seconds, job_gpus);
}

}  // namespace shardguard::sim
