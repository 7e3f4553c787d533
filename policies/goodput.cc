#include "policies/goodput.h"

#include <algorithm>

namespace shardguard::policies {

std::string_view badput_name(Badput cause) {
  switch (cause) {
    case Badput::kRecompute: return "recompute";
    case Badput::kRestart: return "restart";
    case Badput::kCheckpoint: return "checkpoint";
    case Badput::kWaiting: return "waiting";
  }
  return "unknown";
}

double GoodputTotals::ratio() const {
  return allocated_gpu_seconds > 0 ? productive_gpu_seconds / allocated_gpu_seconds : 0.0;
}

double GoodputTotals::badput_total() const {
  double sum = 0;
  for (double v : badput_gpu_seconds) sum += v;
  return sum;
}

void GoodputAccumulator::training(double seconds, uint32_t gpus) {
  if (seconds <= 0) return;
  const double g = seconds * gpus;
  totals_.allocated_gpu_seconds += g;
  totals_.productive_gpu_seconds += g;
}

void GoodputAccumulator::badput(Badput cause, double seconds, uint32_t gpus) {
  if (seconds <= 0) return;
  const double g = seconds * gpus;
  totals_.allocated_gpu_seconds += g;
  totals_.badput_gpu_seconds[static_cast<size_t>(cause)] += g;
}

void GoodputAccumulator::lose(double seconds, uint32_t gpus) {
  if (seconds <= 0) return;
  const double g = std::min(seconds * gpus, totals_.productive_gpu_seconds);
  totals_.productive_gpu_seconds -= g;
  totals_.badput_gpu_seconds[static_cast<size_t>(Badput::kRecompute)] += g;
}

}  // namespace shardguard::policies
