#include "examples/trainer_cuda/gpu_shard.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "examples/trainer_cuda/cuda_check.h"

namespace shardguard::example {
namespace {

// cudaMalloc / cudaMallocHost of at least one element, so that a rank with no rows (more
// ranks than rows) still has valid pointers.
template <typename T>
T* device_alloc(size_t n) {
  void* p = nullptr;
  SG_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

template <typename T>
T* host_alloc(size_t n) {
  void* p = nullptr;
  SG_CUDA_CHECK(cudaMallocHost(&p, std::max<size_t>(n, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

}  // namespace

GpuShard::GpuShard(const TrainConfig& c, uint64_t row0, uint64_t rows)
    : cfg_(c), row0_(row0), rows_(rows), in_dim_(c.in_dim), elems_(rows * c.in_dim) {
  SG_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  SG_CUDA_CHECK(cudaEventCreateWithFlags(&batch_copied_, cudaEventDisableTiming));
  view_.w = device_alloc<float>(elems_);
  view_.m = device_alloc<float>(elems_);
  view_.v = device_alloc<float>(elems_);
  view_.grad = device_alloc<float>(elems_);
  view_.row_loss = device_alloc<double>(rows_);
  view_.rows = uint32_t(rows_);
  view_.in_dim = uint32_t(in_dim_);
  d_x_ = device_alloc<float>(c.batch * c.in_dim);
  d_y_ = device_alloc<float>(c.batch * rows_);
  d_loss_ = device_alloc<double>(1);
  h_x_ = host_alloc<float>(c.batch * c.in_dim);
  h_y_ = host_alloc<float>(c.batch * rows_);
  h_loss_ = host_alloc<double>(1);
  // A fresh start: zero weights and moments, as the CPU trainer's init_shard.
  for (float* d : {view_.w, view_.m, view_.v})
    SG_CUDA_CHECK(cudaMemsetAsync(d, 0, std::max<size_t>(elems_, 1) * sizeof(float), compute_));
  SG_CUDA_CHECK(cudaMemsetAsync(view_.row_loss, 0, std::max<uint64_t>(rows_, 1) * sizeof(double),
                                compute_));
  SG_CUDA_CHECK(cudaStreamSynchronize(compute_));
}

GpuShard::~GpuShard() {
  // Best effort at exit: errors here cannot change the (already saved) results.
  cudaStreamSynchronize(compute_);
  release_host();
  for (void* d : {static_cast<void*>(view_.w), static_cast<void*>(view_.m),
                  static_cast<void*>(view_.v), static_cast<void*>(view_.grad),
                  static_cast<void*>(view_.row_loss), static_cast<void*>(d_x_),
                  static_cast<void*>(d_y_), static_cast<void*>(d_loss_)})
    cudaFree(d);
  for (void* h : {static_cast<void*>(h_x_), static_cast<void*>(h_y_), static_cast<void*>(h_loss_)})
    cudaFreeHost(h);
  cudaEventDestroy(batch_copied_);
  cudaStreamDestroy(compute_);
}

void GpuShard::train_step(const DataSet& data, const std::vector<uint64_t>& batch, uint64_t step) {
  // The staging buffers still feed the previous step's copy until its event fires.
  if (batch_in_flight_) SG_CUDA_CHECK(cudaEventSynchronize(batch_copied_));
  const size_t n = batch.size();
  for (size_t s = 0; s < n; ++s) {
    std::memcpy(h_x_ + s * in_dim_, data.x(batch[s]), in_dim_ * sizeof(float));
    for (uint64_t r = 0; r < rows_; ++r) h_y_[s * rows_ + r] = data.y(batch[s], row0_ + r);
  }
  SG_CUDA_CHECK(cudaMemcpyAsync(d_x_, h_x_, n * in_dim_ * sizeof(float), cudaMemcpyHostToDevice,
                                compute_));
  if (rows_ > 0)
    SG_CUDA_CHECK(cudaMemcpyAsync(d_y_, h_y_, n * rows_ * sizeof(float), cudaMemcpyHostToDevice,
                                  compute_));
  SG_CUDA_CHECK(cudaEventRecord(batch_copied_, compute_));
  batch_in_flight_ = true;

  // The same scalars as the CPU trainer's train_step, computed the same way on the host.
  constexpr float kBeta1 = 0.9f, kBeta2 = 0.999f;
  AdamStep adam;
  adam.lr = learning_rate(cfg_, step);
  adam.bc1 = 1.0f - std::pow(kBeta1, float(step));
  adam.bc2 = 1.0f - std::pow(kBeta2, float(step));
  launch_train_rows(view_, d_x_, d_y_, uint32_t(n), adam, compute_);
}

double GpuShard::global_loss(ncclComm_t comm) {
  launch_sum_losses(view_.row_loss, uint32_t(rows_), d_loss_, compute_);
  SG_NCCL_CHECK(ncclAllReduce(d_loss_, d_loss_, 1, ncclFloat64, ncclSum, comm, compute_));
  SG_CUDA_CHECK(cudaMemcpyAsync(h_loss_, d_loss_, sizeof(double), cudaMemcpyDeviceToHost, compute_));
  SG_CUDA_CHECK(cudaStreamSynchronize(compute_));
  return *h_loss_;
}

float* GpuShard::host(int which) {
  if (h_state_[which] == nullptr) h_state_[which] = host_alloc<float>(elems_);
  return h_state_[which];
}

void GpuShard::copy_to_host() {
  const size_t bytes = elems_ * sizeof(float);
  float* const device[3] = {view_.w, view_.m, view_.v};
  for (int i = 0; i < 3; ++i)
    if (bytes > 0)
      SG_CUDA_CHECK(cudaMemcpyAsync(host(i), device[i], bytes, cudaMemcpyDeviceToHost, compute_));
  SG_CUDA_CHECK(cudaStreamSynchronize(compute_));
}

void GpuShard::upload() {
  synchronize();
  const size_t bytes = elems_ * sizeof(float);
  if (bytes == 0) return;
  float* const device[3] = {view_.w, view_.m, view_.v};
  for (int i = 0; i < 3; ++i)
    SG_CUDA_CHECK(cudaMemcpyAsync(device[i], host(i), bytes, cudaMemcpyHostToDevice, compute_));
  SG_CUDA_CHECK(cudaStreamSynchronize(compute_));
}

void GpuShard::release_host() {
  for (float*& h : h_state_) {
    if (h != nullptr) cudaFreeHost(h);
    h = nullptr;
  }
}

void GpuShard::synchronize() { SG_CUDA_CHECK(cudaStreamSynchronize(compute_)); }

}  // namespace shardguard::example
