#include "agent/health/nvml_library.h"

#include <dlfcn.h>

namespace shardguard::agent {

namespace {

template <typename Fn>
bool bind(void* handle, const char* symbol, Fn& out) {
  out = reinterpret_cast<Fn>(::dlsym(handle, symbol));
  return out != nullptr;
}

}  // namespace

Result<std::unique_ptr<NvmlLibrary>> NvmlLibrary::open(const std::string& path) {
  ::dlerror();
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return Error(ErrorCode::kUnsupported,
                 "dlopen '" + path + "': " + (why != nullptr ? why : "unknown error"));
  }
  NvmlApi api{};
  const char* missing = nullptr;
  if (!bind(handle, "nvmlInit_v2", api.init)) missing = "nvmlInit_v2";
  if (!bind(handle, "nvmlShutdown", api.shutdown)) missing = "nvmlShutdown";
  if (!bind(handle, "nvmlDeviceGetCount_v2", api.device_count)) missing = "nvmlDeviceGetCount_v2";
  if (!bind(handle, "nvmlDeviceGetHandleByIndex_v2", api.device_by_index))
    missing = "nvmlDeviceGetHandleByIndex_v2";
  if (!bind(handle, "nvmlErrorString", api.error_string)) missing = "nvmlErrorString";
  if (missing != nullptr) {
    ::dlclose(handle);
    return Error(ErrorCode::kUnsupported, "'" + path + "' lacks " + missing);
  }
  bind(handle, "nvmlDeviceGetName", api.device_name);
  bind(handle, "nvmlDeviceGetTotalEccErrors", api.total_ecc_errors);
  bind(handle, "nvmlDeviceGetRemappedRows", api.remapped_rows);
  bind(handle, "nvmlDeviceGetRetiredPagesPendingStatus", api.retired_pages_pending);
  return std::unique_ptr<NvmlLibrary>(new NvmlLibrary(handle, api));
}

NvmlLibrary::~NvmlLibrary() {
  if (initialized_) api_.shutdown();
  ::dlclose(handle_);
}

nvml::Return NvmlLibrary::init() {
  if (initialized_) return nvml::kSuccess;
  const nvml::Return r = api_.init();
  initialized_ = r == nvml::kSuccess;
  return r;
}

std::string NvmlLibrary::describe(const char* call, nvml::Return code) const {
  const char* text = api_.error_string(code);
  return std::string(call) + ": " + (text != nullptr ? text : "error " + std::to_string(code));
}

}  // namespace shardguard::agent
