#include "sim/failure_table.h"

#include <limits>

namespace shardguard::sim {
namespace {

// Table 5 of the Llama 3 paper, in its order, with the interruption counts as weights. The
// paper prints 30.1% beside "Faulty GPU (148)", but 148 of 419 is 35.3% and every other row's
// percentage is its count over 419: the counts are used. How each cause reaches the supervisor
// and whether the node must be swapped are our reading of the cause (hardware is swapped;
// software, dependencies and NCCL timeouts restart in place; host-level faults take the host).
const std::vector<FailureCause>& table() {
  using M = Manifest;
  static const std::vector<FailureCause> kTable = {
      {"faulty GPU", "GPU", 148, M::kCrash, true},
      {"GPU HBM3 memory", "GPU", 72, M::kCrash, true},
      {"software bug", "dependency", 54, M::kCrash, false},
      {"network switch/cable", "network", 35, M::kCrash, true},
      {"host maintenance", "unplanned maintenance", 32, M::kNodeLost, true},
      {"GPU SRAM memory", "GPU", 19, M::kCrash, true},
      {"GPU system processor", "GPU", 17, M::kCrash, true},
      {"NIC", "host", 7, M::kCrash, true},
      {"NCCL watchdog timeouts", "unknown", 7, M::kHang, false},
      {"silent data corruption", "GPU", 6, M::kCrash, true},
      {"GPU thermal interface + sensor", "GPU", 6, M::kCrash, true},
      {"SSD", "host", 3, M::kNodeLost, true},
      {"power supply", "host", 3, M::kNodeLost, true},
      {"server chassis", "host", 2, M::kNodeLost, true},
      {"IO expansion board", "host", 2, M::kNodeLost, true},
      {"dependency", "dependency", 2, M::kCrash, false},
      {"CPU", "host", 2, M::kNodeLost, true},
      {"system memory", "host", 2, M::kNodeLost, true},
  };
  return kTable;
}

}  // namespace

std::string_view manifest_name(Manifest m) {
  switch (m) {
    case Manifest::kCrash:
      return "crash";
    case Manifest::kHang:
      return "hang";
    case Manifest::kNodeLost:
      return "node_lost";
  }
  return "unknown";
}

std::span<const FailureCause> llama3_causes() { return table(); }

std::vector<FailureCause> causes_of(const FailureModel& model) {
  if (model.kind == FailureModel::Kind::kNone) return {};
  if (!model.causes.empty()) return model.causes;
  return table();
}

double gpu_failure_rate(const FailureModel& model) {
  if (model.kind == FailureModel::Kind::kNone) return 0;
  const double base = model.per_gpu_rate > 0
                          ? model.per_gpu_rate
                          : kLlama3Interruptions / (kLlama3Days * 86400.0 * kLlama3Gpus);
  return base * model.scale;
}

double job_mtbf_seconds(const FailureModel& model, uint64_t gpus) {
  const double rate = gpu_failure_rate(model) * double(gpus);
  return rate > 0 ? 1.0 / rate : std::numeric_limits<double>::infinity();
}

FailureModel exponential_failures(double mtbf_seconds, uint64_t gpus) {
  FailureModel m;
  m.kind = FailureModel::Kind::kExponential;
  m.per_gpu_rate = 1.0 / (mtbf_seconds * double(gpus));
  m.causes = {{"failure", "exponential", 1, Manifest::kCrash, false}};
  return m;
}

}  // namespace shardguard::sim
