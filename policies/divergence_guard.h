// The divergence guard's rules (open issue "on-call"; DESIGN.md section 6): is a rank's loss or
// gradient norm telling us the weights went bad? Fed the scalar windows ranks send with their
// heartbeats (core/scalar_window.h); an anomaly on any rank counts. Two rules:
//
//   nonfinite  a NaN or an infinity in a listed scalar (by default the loss only: with AMP's
//              dynamic loss scaling a non-finite gradient norm is routine, the step is skipped)
//   spike      a listed scalar above spike_factor x its rolling median (the last
//              `median_window` heartbeats of that rank, once `min_samples` are in) in every
//              heartbeat over at least `spike_steps` steps
//
// Heartbeats aggregate, so the guard cannot tell which step of a window went bad: an anomaly
// starts at the first step of the window where it began, and every checkpoint at or after that
// step is suspect. What to do about it (quarantine, roll back, skip batches, give up) is the
// AttemptMachine's. Pure; thread-safety: none, one guard per machine.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "core/scalar_window.h"

namespace shardguard::policies {

struct GuardOptions {
  bool enabled = true;  // acts only on scalars the job reports
  std::set<std::string> nonfinite = {"loss"};
  double spike_factor = 0;  // <= 1: the spike rule is off
  uint64_t spike_steps = 10;
  std::set<std::string> spike_scalars = {"loss"};
  uint32_t median_window = 100;
  uint32_t min_samples = 10;
  // Rollbacks after anomalies before the run gives up; a checkpoint committed past the last
  // anomaly's step starts the count again.
  uint32_t rollbacks = 2;
  uint64_t skip_batches = 0;  // SHARDGUARD_SKIP_BATCHES on a relaunch after a rollback
};

// The names the guard knows: "loss", "grad_norm".
bool known_scalar(std::string_view name);

struct Anomaly {
  uint32_t rank = 0;
  std::string scalar;      // "loss", "grad_norm"
  std::string rule;        // "nonfinite", "spike"
  uint64_t first_step = 0; // the suspect range starts here
  uint64_t seen_step = 0;  // the last step of the window that confirmed it
  // The first step whose checkpoint is suspect. A value reported at step s was computed on the
  // state the checkpoint of step s-1 holds, so this is the step before the first suspect value:
  // the first NaN's step for "nonfinite" (exact, wherever the heartbeat window started), the
  // window's first step for "spike" (the window does not say which of its steps spiked).
  uint64_t suspect_from = 0;
  double value = 0;        // spike: the largest value seen in the run
  double median = 0;       // spike: the rolling median it was compared with

  // "rank 1: loss NaN or Inf at step 57 (steps 55-57)", "rank 0: loss 84.2 > 10 x median 3.1
  // for 12 steps from step 200".
  std::string describe(double spike_factor) const;
};

class DivergenceGuard {
 public:
  explicit DivergenceGuard(GuardOptions options);

  // One heartbeat's scalars of `rank`; the first anomaly they show, if any.
  std::optional<Anomaly> observe(uint32_t rank, const StepScalars& scalars);
  // Forgets every rank's history (a new attempt: its ranks start from a checkpoint).
  void reset();
  const GuardOptions& options() const { return options_; }

 private:
  struct Series {
    std::deque<double> samples;  // the last finite values, one per heartbeat
    std::optional<uint64_t> spike_from;
    double spike_peak = 0;
    double spike_median = 0;
  };
  std::optional<Anomaly> check(uint32_t rank, const std::string& name, const ScalarWindow& w);

  GuardOptions options_;
  std::map<std::pair<uint32_t, std::string>, Series> series_;
};

}  // namespace shardguard::policies
