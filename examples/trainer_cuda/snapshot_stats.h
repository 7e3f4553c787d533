// What checkpoints cost sg_trainer_cuda's training loop, for examples/gpu_check.sh: each
// step's wall time on the host is recorded, and each checkpoint's window (from the step that
// started it to one step after its copy was handed to the writer: the host sees a GPU-side
// wait one step late, when it next synchronizes on a batch copy). A checkpoint's stall is the
// time its window's steps took beyond the median step outside every window.
// Thread-safety: none (the training thread only).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace shardguard::example {

class SnapshotStats {
 public:
  void step_took(uint64_t step, double seconds) { step_seconds_[step] = seconds; }
  // A checkpoint began at `step`: its snapshot of `bytes` cost `start_seconds` right there.
  void began(uint64_t step, uint64_t bytes, double start_seconds);
  // Its copy was handed to the writer at `step` after `copy_seconds` on the copy stream.
  void handed_over(uint64_t step, double copy_seconds);
  // "snapshot stall: ..." lines: count, bytes, first and later stalls (median, max), the
  // copies' time and rate, the median step. Empty when there was no checkpoint.
  std::string report(const std::string& mode) const;

 private:
  struct Snapshot {
    uint64_t begin = 0, end = 0;  // window of steps [begin, end]
    uint64_t bytes = 0;
    double start_seconds = 0, copy_seconds = 0;
    bool handed = false;
  };
  std::map<uint64_t, double> step_seconds_;
  std::vector<Snapshot> snapshots_;
};

}  // namespace shardguard::example
