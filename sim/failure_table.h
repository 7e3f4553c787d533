// Failure processes of the simulated fleet: the causes, how often each strikes, and how each
// shows itself to the supervisor. The default mix and rate are Meta's published Llama 3 run,
// in one table (failure_table.cc) with its source; rates scale with the GPU count.
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace shardguard::sim {

// How a failure reaches the supervisor.
enum class Manifest {
  kCrash,     // a rank on the node dies (CUDA error, XID, NCCL error): RankExited
  kHang,      // ranks stop making progress and heartbeating: found by the hang timeout
  kNodeLost,  // the host goes away: NodeLost after the heartbeat misses
};
std::string_view manifest_name(Manifest m);

struct FailureCause {
  std::string name;
  std::string category;
  double weight = 0;  // share of all failures (counts in the source)
  Manifest manifest = Manifest::kCrash;
  bool replace_node = false;  // hardware: the node is swapped; else it restarts in place
};

struct FailureModel {
  enum class Kind { kLlama3, kExponential, kNone };
  Kind kind = Kind::kLlama3;
  // Failures per GPU-second; the job's MTBF is 1 / (rate x GPUs).
  double per_gpu_rate = 0;           // 0: the table's own (Llama 3: 419 in 54 days on 16,384 GPUs)
  double scale = 1.0;                // multiplies the rate (a younger or older fleet)
  std::vector<FailureCause> causes;  // kExponential: one transient crash cause
};

// Meta, "The Llama 3 Herd of Models" (arXiv:2407.21783, 2024), Table 5: root causes of the
// 419 unexpected interruptions during a 54-day snapshot of Llama 3 405B pre-training on
// 16,384 H100 GPUs.
std::span<const FailureCause> llama3_causes();
inline constexpr double kLlama3Interruptions = 419;
inline constexpr double kLlama3Days = 54;
inline constexpr double kLlama3Gpus = 16384;

// The causes in effect (the table's, or the model's own list), never empty unless kNone.
std::vector<FailureCause> causes_of(const FailureModel& model);
// Failures per GPU-second after scaling.
double gpu_failure_rate(const FailureModel& model);
// Mean time between failures of a job on `gpus` GPUs, seconds (infinity when none).
double job_mtbf_seconds(const FailureModel& model, uint64_t gpus);
// A model of one transient crash cause with mean time `mtbf` seconds at `gpus` GPUs (Daly).
FailureModel exponential_failures(double mtbf_seconds, uint64_t gpus);

}  // namespace shardguard::sim
