// Checks for every CUDA runtime and NCCL call of sg_trainer_cuda: on failure they print
// file:line, the call and the library's error string to stderr and exit with
// kExitGpuError. A GPU error leaves the device or the communicator in an unknown state, so
// the process stops instead of checkpointing garbage; the supervisor sees a crash and
// relaunches from the last committed checkpoint.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>

namespace shardguard::example {

inline constexpr int kExitGpuError = 1;

[[noreturn]] inline void cuda_fail(cudaError_t e, const char* call, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: CUDA error %s (%s) in %s\n", file, line, cudaGetErrorName(e),
               cudaGetErrorString(e), call);
  std::fflush(stderr);
  std::exit(kExitGpuError);
}

[[noreturn]] inline void nccl_fail(ncclResult_t r, const char* call, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: NCCL error %d (%s) in %s: %s\n", file, line, int(r),
               ncclGetErrorString(r), call, ncclGetLastError(nullptr));
  std::fflush(stderr);
  std::exit(kExitGpuError);
}

}  // namespace shardguard::example

#define SG_CUDA_CHECK(call)                                                          \
  do {                                                                               \
    const cudaError_t sg_cuda_err_ = (call);                                         \
    if (sg_cuda_err_ != cudaSuccess)                                                 \
      ::shardguard::example::cuda_fail(sg_cuda_err_, #call, __FILE__, __LINE__);     \
  } while (0)

// After a kernel launch: launch errors now, execution errors at the next synchronization.
#define SG_CUDA_CHECK_LAUNCH() SG_CUDA_CHECK(cudaGetLastError())

#define SG_NCCL_CHECK(call)                                                          \
  do {                                                                               \
    const ncclResult_t sg_nccl_res_ = (call);                                        \
    if (sg_nccl_res_ != ncclSuccess)                                                 \
      ::shardguard::example::nccl_fail(sg_nccl_res_, #call, __FILE__, __LINE__);     \
  } while (0)
