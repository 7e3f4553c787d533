#include "hooks/gpu_runtime.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

namespace shardguard::hooks {
namespace {

template <typename Fn>
bool bind(void* handle, const char* symbol, Fn& out) {
  out = reinterpret_cast<Fn>(::dlsym(handle, symbol));
  return out != nullptr;
}

// Binds every entry point; the name of the first one missing, or nullptr.
const char* bind_all(void* h, CudaApi& a) {
  if (!bind(h, "cudaStreamCreateWithFlags", a.stream_create_with_flags))
    return "cudaStreamCreateWithFlags";
  if (!bind(h, "cudaStreamDestroy", a.stream_destroy)) return "cudaStreamDestroy";
  if (!bind(h, "cudaStreamWaitEvent", a.stream_wait_event)) return "cudaStreamWaitEvent";
  if (!bind(h, "cudaEventCreateWithFlags", a.event_create_with_flags))
    return "cudaEventCreateWithFlags";
  if (!bind(h, "cudaEventDestroy", a.event_destroy)) return "cudaEventDestroy";
  if (!bind(h, "cudaEventRecord", a.event_record)) return "cudaEventRecord";
  if (!bind(h, "cudaEventQuery", a.event_query)) return "cudaEventQuery";
  if (!bind(h, "cudaEventSynchronize", a.event_synchronize)) return "cudaEventSynchronize";
  if (!bind(h, "cudaEventElapsedTime", a.event_elapsed_time)) return "cudaEventElapsedTime";
  if (!bind(h, "cudaMemcpyAsync", a.memcpy_async)) return "cudaMemcpyAsync";
  if (!bind(h, "cudaHostRegister", a.host_register)) return "cudaHostRegister";
  if (!bind(h, "cudaHostUnregister", a.host_unregister)) return "cudaHostUnregister";
  if (!bind(h, "cudaGetErrorString", a.get_error_string)) return "cudaGetErrorString";
  return nullptr;
}

}  // namespace

Result<std::shared_ptr<const CudaRuntime>> CudaRuntime::load() {
  std::vector<std::string> names;
  if (const char* p = std::getenv("SHARDGUARD_CUDART"); p != nullptr && *p != '\0')
    names.emplace_back(p);
  else
    names = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"};
  std::string tried;
  for (const auto& name : names) {
    ::dlerror();
    void* h = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* why = ::dlerror();
      tried += (tried.empty() ? "" : "; ") + std::string(why != nullptr ? why : name);
      continue;
    }
    CudaApi api;
    if (const char* missing = bind_all(h, api)) {
      ::dlclose(h);
      tried += (tried.empty() ? "" : "; ") + name + " lacks " + missing;
      continue;
    }
    return std::shared_ptr<const CudaRuntime>(new CudaRuntime(h, name, api));
  }
  return Error(ErrorCode::kUnsupported, "no CUDA runtime for GPU snapshots: " + tried);
}

CudaRuntime::~CudaRuntime() { ::dlclose(handle_); }

Status CudaRuntime::check(cuda::Error e, const char* call) const {
  if (e == cuda::kSuccess) return {};
  const char* text = api_.get_error_string(e);
  return Error(ErrorCode::kInternal, std::string(call) + ": " +
                                         (text != nullptr ? text : "unknown CUDA error") +
                                         " (error " + std::to_string(e) + ")");
}

}  // namespace shardguard::hooks
