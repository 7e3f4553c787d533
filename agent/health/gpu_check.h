// The "gpu" check, through NVML loaded at run time: device count against the expected
// count, GPUs lost (NVML_ERROR_GPU_IS_LOST: fell off the bus), volatile uncorrectable ECC
// errors, and memory repair state (row remapping on Ampere+, page retirement before).
//   fatal:   fewer GPUs than expected, a lost GPU, uncorrectable ECC errors since the last
//            driver load, a failed row remap
//   warning: a row remap or page retirement pending (takes effect at the next GPU reset),
//            an NVML call failing otherwise
// Without the library (no driver, no GPU) the check reports "not available" and probes again
// on later runs.
//
// Thread-safety: none; runs on the loop thread (HealthCheck). NVML calls block briefly.
#pragma once

#include <memory>
#include <string>

#include "agent/health/health_check.h"
#include "agent/health/nvml_library.h"

namespace shardguard::agent {

struct GpuCheckConfig {
  std::string library = "libnvidia-ml.so.1";  // path or soname for dlopen
  int expected_gpus = -1;  // -1: as many as the first look that found any; 0: no check
};

class GpuCheck final : public HealthCheck {
 public:
  explicit GpuCheck(GpuCheckConfig config);
  ~GpuCheck() override;

  std::string_view name() const override { return "gpu"; }
  void run(Done done) override;

 private:
  HealthFinding look();
  void check_device(unsigned int index, FindingBuilder& out);

  GpuCheckConfig config_;
  std::unique_ptr<NvmlLibrary> lib_;
  int expected_ = -1;
};

}  // namespace shardguard::agent
