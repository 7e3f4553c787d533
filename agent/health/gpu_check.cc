#include "agent/health/gpu_check.h"

namespace shardguard::agent {

GpuCheck::GpuCheck(GpuCheckConfig config)
    : config_(std::move(config)), expected_(config_.expected_gpus) {}

GpuCheck::~GpuCheck() = default;

void GpuCheck::run(Done done) { done(look()); }

HealthFinding GpuCheck::look() {
  if (!lib_) {
    auto lib = NvmlLibrary::open(config_.library);
    if (!lib.ok()) return not_available_finding("gpu", "NVML: " + lib.error().message());
    lib_ = std::move(lib).value();
  }
  FindingBuilder out("gpu");
  const nvml::Return init = lib_->init();
  if (init == nvml::kErrorDriverNotLoaded || init == nvml::kErrorLibraryNotFound)
    return not_available_finding("gpu", lib_->describe("nvmlInit_v2", init));
  if (init != nvml::kSuccess) {
    out.add(expected_ > 0 ? HealthFinding::kFatal : HealthFinding::kWarning,
            lib_->describe("nvmlInit_v2", init));
    return out.finish();
  }
  unsigned int count = 0;
  if (const nvml::Return r = lib_->api().device_count(&count); r != nvml::kSuccess) {
    out.add(r == nvml::kErrorGpuIsLost ? HealthFinding::kFatal : HealthFinding::kWarning,
            lib_->describe("nvmlDeviceGetCount_v2", r));
    return out.finish();
  }
  if (expected_ < 0 && count > 0) expected_ = static_cast<int>(count);  // the baseline
  if (count == 0 && expected_ <= 0) return not_available_finding("gpu", "NVML sees no GPU");
  if (expected_ > 0 && count < static_cast<unsigned int>(expected_)) {
    out.add(HealthFinding::kFatal,
            std::to_string(count) + " of " + std::to_string(expected_) + " expected GPUs visible");
  }
  for (unsigned int i = 0; i < count; ++i) check_device(i, out);
  return out.finish(std::to_string(count) + " GPU(s) healthy");
}

void GpuCheck::check_device(unsigned int index, FindingBuilder& out) {
  const NvmlApi& api = lib_->api();
  std::string gpu = "GPU " + std::to_string(index);
  auto failed = [&](const char* call, nvml::Return r) {
    if (r == nvml::kErrorGpuIsLost) {
      out.add(HealthFinding::kFatal, gpu + ": lost (fallen off the bus; " + call + ")");
    } else {
      out.add(HealthFinding::kWarning, gpu + ": " + lib_->describe(call, r));
    }
  };
  nvml::Device dev = nullptr;
  if (const nvml::Return r = api.device_by_index(index, &dev); r != nvml::kSuccess)
    return failed("nvmlDeviceGetHandleByIndex_v2", r);
  char name[96] = {};
  if (api.device_name != nullptr && api.device_name(dev, name, sizeof name) == nvml::kSuccess &&
      name[0] != '\0') {
    gpu += " (" + std::string(name) + ")";
  }
  if (api.total_ecc_errors != nullptr) {
    unsigned long long ecc = 0;
    const nvml::Return r =
        api.total_ecc_errors(dev, nvml::kMemoryErrorUncorrected, nvml::kVolatileEcc, &ecc);
    if (r == nvml::kSuccess && ecc > 0) {
      out.add(HealthFinding::kFatal, gpu + ": " + std::to_string(ecc) +
                                         " uncorrectable ECC error(s) since the last driver load");
    } else if (r == nvml::kErrorGpuIsLost) {
      return failed("nvmlDeviceGetTotalEccErrors", r);
    }  // kErrorNotSupported: no ECC on this board; other errors say nothing about health
  }
  nvml::Return remap = nvml::kErrorNotSupported;
  if (api.remapped_rows != nullptr) {
    unsigned int corrected = 0, uncorrected = 0, pending = 0, failure = 0;
    remap = api.remapped_rows(dev, &corrected, &uncorrected, &pending, &failure);
    if (remap == nvml::kErrorGpuIsLost) return failed("nvmlDeviceGetRemappedRows", remap);
    if (remap == nvml::kSuccess && failure != 0) {
      out.add(HealthFinding::kFatal, gpu + ": row remapping failed (" +
                                         std::to_string(uncorrected) +
                                         " rows remapped for "
                                         "uncorrectable errors)");
    } else if (remap == nvml::kSuccess && pending != 0) {
      out.add(HealthFinding::kWarning, gpu + ": row remap pending (needs a GPU reset)");
    }
  }
  if (remap == nvml::kErrorNotSupported && api.retired_pages_pending != nullptr) {
    int pending = 0;
    const nvml::Return r = api.retired_pages_pending(dev, &pending);
    if (r == nvml::kErrorGpuIsLost) return failed("nvmlDeviceGetRetiredPagesPendingStatus", r);
    if (r == nvml::kSuccess && pending == nvml::kFeatureEnabled)
      out.add(HealthFinding::kWarning, gpu + ": page retirement pending (needs a GPU reset)");
  }
}

}  // namespace shardguard::agent
