// This rank's rows of the example model (examples/trainer/model.h) on the GPU: weights and
// Adam moments in device memory, the batch copied in each step through pinned staging
// buffers, and pinned host copies of the state made only when needed (resume, and the
// synchronous `--snapshot host` checkpoints).
//
// One stream, `compute`, runs the batch copies, the training kernel, the loss sum and the
// NCCL all-reduce. Checkpoints normally read the device state straight from the device
// (device_w() ...) on the shardguard client's own copy stream (hooks/gpu_snapshot.h),
// fenced against `compute`. Every CUDA call is checked (cuda_check.h).
// Thread-safety: none (the training thread only).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <span>
#include <vector>

#include "examples/trainer/model.h"
#include "examples/trainer_cuda/kernels.h"

namespace shardguard::example {

class GpuShard {
 public:
  // Allocates the device state (zero weights and moments, as init_shard) and the pinned
  // host buffers once, on the current device.
  GpuShard(const TrainConfig& c, uint64_t row0, uint64_t rows);
  ~GpuShard();
  GpuShard(const GpuShard&) = delete;
  GpuShard& operator=(const GpuShard&) = delete;

  uint64_t row0() const { return row0_; }
  uint64_t rows() const { return rows_; }
  uint64_t in_dim() const { return in_dim_; }

  // Copies the batch's inputs and this shard's targets to the device and queues one Adam
  // step of every owned row (asynchronous; the next call waits for this batch's copy
  // before it reuses the staging buffers).
  void train_step(const DataSet& data, const std::vector<uint64_t>& batch, uint64_t step);

  // The summed squared error of the last step over all ranks (ncclSum of the ranks' sums,
  // float64). A collective: every rank must call it at the same steps. Synchronizes.
  double global_loss(ncclComm_t comm);

  // The training state in device memory (elems() floats each, row-major rows x in_dim) and
  // the stream whose kernels change it: what a GPU snapshot copies, and fences.
  const float* device_w() const { return view_.w; }
  const float* device_m() const { return view_.m; }
  const float* device_v() const { return view_.v; }
  size_t elems() const { return elems_; }
  cudaStream_t compute_stream() const { return compute_; }

  // Page-locked host copies of the state, allocated on first use and kept until
  // release_host(): filled by a resume before upload(), or by copy_to_host().
  std::span<float> host_w() { return {host(0), elems_}; }
  std::span<float> host_m() { return {host(1), elems_}; }
  std::span<float> host_v() { return {host(2), elems_}; }
  // Waits for the queued training work and copies the state device -> host (a synchronous
  // snapshot: the training loop stalls for the whole copy).
  void copy_to_host();
  // Host -> device, then waits for the copy.
  void upload();
  void release_host();

  // Waits for all queued work.
  void synchronize();

 private:
  float* host(int which);

  TrainConfig cfg_;
  uint64_t row0_, rows_, in_dim_;
  size_t elems_;  // rows_ * in_dim_
  cudaStream_t compute_ = nullptr;
  cudaEvent_t batch_copied_ = nullptr;
  bool batch_in_flight_ = false;
  // Device.
  RowsView view_;
  float* d_x_ = nullptr;
  float* d_y_ = nullptr;
  double* d_loss_ = nullptr;
  // Pinned host.
  float* h_state_[3] = {nullptr, nullptr, nullptr};  // w, m, v; on demand
  float* h_x_ = nullptr;
  float* h_y_ = nullptr;
  double* h_loss_ = nullptr;
};

}  // namespace shardguard::example
