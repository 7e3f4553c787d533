// The few CUDA runtime calls the GPU snapshot path needs, loaded at run time with dlopen, so
// that libshardguard and the C++ client run on machines without CUDA (as the agent loads
// NVML). The declarations are the runtime's C ABI (stable across CUDA 11-13): streams and
// events are opaque pointers, errors ints, and the few enum values are spelled out below.
// Internal to hooks/gpu_snapshot.cc and its tests. Thread-safety: a loaded CudaRuntime is
// immutable; the CUDA runtime itself is thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/result.h"

namespace shardguard::hooks {

namespace cuda {
using Error = int;     // cudaError_t
using Stream = void*;  // cudaStream_t (nullptr: the legacy default stream)
using Event = void*;   // cudaEvent_t
inline constexpr Error kSuccess = 0;
inline constexpr Error kErrorNotReady = 600;
inline constexpr Error kErrorHostMemoryAlreadyRegistered = 712;
inline constexpr int kMemcpyDeviceToHost = 2;
inline constexpr unsigned kStreamNonBlocking = 0x01;
inline constexpr unsigned kEventDefault = 0x00;
inline constexpr unsigned kEventDisableTiming = 0x02;
inline constexpr unsigned kHostRegisterDefault = 0x00;
}  // namespace cuda

struct CudaApi {
  cuda::Error (*stream_create_with_flags)(cuda::Stream*, unsigned) = nullptr;
  cuda::Error (*stream_destroy)(cuda::Stream) = nullptr;
  cuda::Error (*stream_wait_event)(cuda::Stream, cuda::Event, unsigned) = nullptr;
  cuda::Error (*event_create_with_flags)(cuda::Event*, unsigned) = nullptr;
  cuda::Error (*event_destroy)(cuda::Event) = nullptr;
  cuda::Error (*event_record)(cuda::Event, cuda::Stream) = nullptr;
  cuda::Error (*event_query)(cuda::Event) = nullptr;
  cuda::Error (*event_synchronize)(cuda::Event) = nullptr;
  cuda::Error (*event_elapsed_time)(float*, cuda::Event, cuda::Event) = nullptr;
  cuda::Error (*memcpy_async)(void*, const void*, size_t, int, cuda::Stream) = nullptr;
  cuda::Error (*host_register)(void*, size_t, unsigned) = nullptr;
  cuda::Error (*host_unregister)(void*) = nullptr;
  const char* (*get_error_string)(cuda::Error) = nullptr;
};

class CudaRuntime {
 public:
  // The runtime at SHARDGUARD_CUDART when set (a path), else the first of libcudart.so.13,
  // .12, .11.0 and libcudart.so that loads (one the process already has is reused).
  // kUnsupported names what was tried when none loads or a symbol is missing.
  static Result<std::shared_ptr<const CudaRuntime>> load();
  ~CudaRuntime();
  CudaRuntime(const CudaRuntime&) = delete;
  CudaRuntime& operator=(const CudaRuntime&) = delete;

  const CudaApi& api() const { return api_; }
  const std::string& path() const { return path_; }
  // OK for cuda::kSuccess, else kInternal "<call>: <the runtime's message> (error N)".
  Status check(cuda::Error e, const char* call) const;

 private:
  CudaRuntime(void* handle, std::string path, CudaApi api)
      : handle_(handle), path_(std::move(path)), api_(api) {}
  void* handle_;
  std::string path_;
  CudaApi api_;
};

}  // namespace shardguard::hooks
