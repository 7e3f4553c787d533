// NVML loaded at run time (dlopen, as mesos' nvml.hpp), so one agent binary runs on
// machines with and without NVIDIA GPUs. Only the few calls the GPU check needs are bound;
// the constants are NVML's documented ABI values (nvml.h), declared here so that no NVIDIA
// header is needed to build.
//
// Thread-safety: NVML itself is thread-safe; an NvmlLibrary is owned by one check.
#pragma once

#include <memory>
#include <string>

#include "core/result.h"

namespace shardguard::agent {

namespace nvml {
using Return = int;  // nvmlReturn_t
using Device = struct nvmlDevice_st*;
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorLibraryNotFound = 12;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr int kMemoryErrorUncorrected = 1;  // nvmlMemoryErrorType_t
inline constexpr int kVolatileEcc = 0;             // nvmlEccCounterType_t
inline constexpr int kFeatureEnabled = 1;          // nvmlEnableState_t
}  // namespace nvml

// The bound entry points. Required ones are never null; optional ones (absent from old
// drivers) may be.
struct NvmlApi {
  nvml::Return (*init)();                                          // nvmlInit_v2
  nvml::Return (*shutdown)();                                      // nvmlShutdown
  nvml::Return (*device_count)(unsigned int*);                     // nvmlDeviceGetCount_v2
  nvml::Return (*device_by_index)(unsigned int, nvml::Device*);    // ..._GetHandleByIndex_v2
  const char* (*error_string)(nvml::Return);                       // nvmlErrorString
  nvml::Return (*device_name)(nvml::Device, char*, unsigned int);  // optional
  nvml::Return (*total_ecc_errors)(nvml::Device, int, int, unsigned long long*);  // optional
  nvml::Return (*remapped_rows)(nvml::Device, unsigned int*, unsigned int*, unsigned int*,
                                unsigned int*);               // optional (Ampere+)
  nvml::Return (*retired_pages_pending)(nvml::Device, int*);  // optional (pre-Ampere)
};

class NvmlLibrary {
 public:
  // dlopen()s `path` ("libnvidia-ml.so.1", or a test's fake) and binds the entry points.
  // kUnsupported when the library is missing or lacks a required symbol; the message says
  // which. Does not call nvmlInit.
  static Result<std::unique_ptr<NvmlLibrary>> open(const std::string& path);
  ~NvmlLibrary();  // nvmlShutdown if initialized, then dlclose
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  // nvmlInit_v2 once; later calls return kSuccess without calling it again.
  nvml::Return init();
  const NvmlApi& api() const { return api_; }
  // "nvmlDeviceGetCount_v2: GPU is lost" style text for `code`.
  std::string describe(const char* call, nvml::Return code) const;

 private:
  NvmlLibrary(void* handle, NvmlApi api) : handle_(handle), api_(api) {}
  void* handle_;
  NvmlApi api_;
  bool initialized_ = false;
};

}  // namespace shardguard::agent
