// This rank's rows of the example model (examples/trainer/model.h) on the GPU: weights and
// Adam moments in device memory, the batch copied in each step through pinned staging
// buffers, and pinned host copies of the state for checkpoints and resume.
//
// Streams: `compute` runs the batch copies, the training kernel, the loss sum and the NCCL
// all-reduce; `copy` runs the checkpoint snapshot (device to host), ordered after the
// compute stream's work by an event. Every CUDA call is checked (cuda_check.h).
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

  // Snapshot for a checkpoint: copies weights and moments into the pinned host buffers on
  // the copy stream, after the queued training work, and waits for the copy. The spans
  // below are then valid until the next snapshot() or upload().
  void snapshot();
  std::span<const float> host_w() const { return {h_w_, elems_}; }
  std::span<const float> host_m() const { return {h_m_, elems_}; }
  std::span<const float> host_v() const { return {h_v_, elems_}; }

  // Resume: fill these with the rows read from a checkpoint, then upload().
  std::span<float> host_w_for_load() { return {h_w_, elems_}; }
  std::span<float> host_m_for_load() { return {h_m_, elems_}; }
  std::span<float> host_v_for_load() { return {h_v_, elems_}; }
  void upload();

  // Waits for all queued work.
  void synchronize();

 private:
  TrainConfig cfg_;
  uint64_t row0_, rows_, in_dim_;
  size_t elems_;  // rows_ * in_dim_
  cudaStream_t compute_ = nullptr, copy_ = nullptr;
  cudaEvent_t batch_copied_ = nullptr, compute_done_ = nullptr;
  bool batch_in_flight_ = false;
  // Device.
  RowsView view_;
  float* d_x_ = nullptr;
  float* d_y_ = nullptr;
  double* d_loss_ = nullptr;
  // Pinned host.
  float* h_w_ = nullptr;
  float* h_m_ = nullptr;
  float* h_v_ = nullptr;
  float* h_x_ = nullptr;
  float* h_y_ = nullptr;
  double* h_loss_ = nullptr;
};

}  // namespace shardguard::example
