// The simulator's one use of the goodput definition (policies/goodput.h): every simulated
// second of every GPU the job holds goes to training or to one badput cause, and work that a
// resume throws away moves from productive to recompute. Kept in this one place so that a
// change of the definition (the on-call issue is extending it) touches one file.
// Thread-safety: none; one ledger per simulated run.
#pragma once

#include <cstdint>

#include "policies/goodput.h"

namespace shardguard::sim {

// What the job's GPUs are doing in an interval.
enum class Activity {
  kTraining,    // steps that count (unless lost later)
  kCheckpoint,  // the loop stopped for a save
  kRestart,     // stopping, backing off, requeued, launching, loading, hung
  kWaiting,     // held but not placed: below MIN, or nodes beyond the running layout
};

class GoodputLedger {
 public:
  // `seconds` during which `used_gpus` do `activity` and the rest of `held_gpus` wait.
  void add(Activity activity, double seconds, uint32_t used_gpus, uint32_t held_gpus);
  // A resume went back `step_seconds` of full-size steps of a job of `job_gpus` GPUs.
  void lose(double step_seconds, uint32_t job_gpus);
  const policies::GoodputTotals& totals() const { return acc_.totals(); }

 private:
  policies::GoodputAccumulator acc_;
};

}  // namespace shardguard::sim
