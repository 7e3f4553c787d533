// Goodput, defined once: productive GPU-seconds / allocated GPU-seconds. Every allocated
// GPU-second is either productive (training steps that were kept) or badput of one cause:
//
//   recompute   steps computed and then lost (redone after a resume from an older checkpoint)
//   restart     stopping, backing off, launching and loading: ranks not training
//   checkpoint  the training loop stalled for a save (a sync save, or an async snapshot)
//   waiting     waiting for nodes (below MIN) or for a notice's deadline with nothing to do
//
// For a job of fixed size this is productive step time / wall time from `start` to `finish`,
// summed over the runs in a run dir; a job that shrank counts its smaller size while small.
// The same accounting serves `shardguard status`, `report`, the Prometheus metric and the
// fleet simulator: callers turn their timeline (events.jsonl, or simulated events) into
// intervals and losses. Pure arithmetic. Thread-safety: none; one accumulator per caller.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace shardguard::policies {

enum class Badput { kRecompute, kRestart, kCheckpoint, kWaiting };
inline constexpr size_t kBadputCauses = 4;
inline constexpr std::array<Badput, kBadputCauses> kAllBadput = {
    Badput::kRecompute, Badput::kRestart, Badput::kCheckpoint, Badput::kWaiting};
std::string_view badput_name(Badput cause);  // "recompute", "restart", "checkpoint", "waiting"

struct GoodputTotals {
  double allocated_gpu_seconds = 0;
  double productive_gpu_seconds = 0;
  std::array<double, kBadputCauses> badput_gpu_seconds{};

  // productive / allocated; 0 when nothing was allocated.
  double ratio() const;
  double badput(Badput cause) const { return badput_gpu_seconds[static_cast<size_t>(cause)]; }
  // The sum over every cause: allocated - productive, up to rounding.
  double badput_total() const;
};

class GoodputAccumulator {
 public:
  // `seconds` of wall time with `gpus` GPUs allocated, spent training (steps that count as
  // productive until lose() takes some back).
  void training(double seconds, uint32_t gpus);
  // `seconds` with `gpus` allocated, spent on `cause`.
  void badput(Badput cause, double seconds, uint32_t gpus);
  // Work already counted as training was lost (a resume went back `seconds` of steps on `gpus`):
  // it moves from productive to recompute. Never more than was counted productive.
  void lose(double seconds, uint32_t gpus);

  const GoodputTotals& totals() const { return totals_; }

 private:
  GoodputTotals totals_;
};

}  // namespace shardguard::policies
