// sg_trainer_cuda's kernels: the per-row forward pass, gradient and Adam update, and the
// per-rank loss sum. See kernels.h for why the results are bit-identical run to run and
// independent of the partition of rows across ranks.
//
// Built without fast-math: IEEE division and square root (nvcc's defaults -prec-div=true,
// -prec-sqrt=true), and the multiply-adds are written as explicit fmaf() so that the
// arithmetic does not depend on the compiler's contraction choices.
#include "examples/trainer_cuda/cuda_check.h"
#include "examples/trainer_cuda/kernels.h"

namespace shardguard::example {
namespace {

// Threads per block. The summation order (thread t owns columns t, t + kThreads, ...) is
// part of the results' definition: changing it changes the bits, consistently.
constexpr int kThreads = 128;
static_assert((kThreads & (kThreads - 1)) == 0, "the tree reduction needs a power of two");

// Sums red[0 .. kThreads) into red[0] with a fixed pairing; every thread must call it.
template <typename T>
__device__ void block_tree_sum(T* red) {
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (int(threadIdx.x) < stride) red[threadIdx.x] += red[threadIdx.x + stride];
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kThreads)
train_rows_kernel(RowsView rv, const float* __restrict__ x, const float* __restrict__ y,
                  uint32_t batch, AdamStep adam) {
  constexpr float kBeta1 = 0.9f, kBeta2 = 0.999f, kEps = 1e-8f;
  __shared__ float red[kThreads];
  __shared__ float err_shared;
  const uint32_t r = blockIdx.x;
  const uint32_t t = threadIdx.x;
  const size_t base = size_t(r) * rv.in_dim;
  float* __restrict__ w = rv.w + base;
  float* __restrict__ m = rv.m + base;
  float* __restrict__ v = rv.v + base;
  float* __restrict__ g = rv.grad + base;

  for (uint32_t k = t; k < rv.in_dim; k += kThreads) g[k] = 0.0f;
  double loss = 0;  // meaningful in thread 0 only
  for (uint32_t s = 0; s < batch; ++s) {
    const float* __restrict__ xs = x + size_t(s) * rv.in_dim;
    // Forward: this thread's columns in order, then the fixed tree.
    float partial = 0.0f;
    for (uint32_t k = t; k < rv.in_dim; k += kThreads) partial = fmaf(w[k], xs[k], partial);
    red[t] = partial;
    block_tree_sum(red);
    if (t == 0) {
      const float err = red[0] - y[size_t(s) * rv.rows + r];
      loss += double(err) * double(err);
      err_shared = err;
    }
    __syncthreads();
    const float err = err_shared;
    // Gradient: each column accumulates over the samples in batch order.
    for (uint32_t k = t; k < rv.in_dim; k += kThreads) g[k] = fmaf(err, xs[k], g[k]);
    // red[] and err_shared are written again only after the next tree's first barrier,
    // which every thread reaches after reading them here.
  }
  const float batch_f = float(batch);
  for (uint32_t k = t; k < rv.in_dim; k += kThreads) {
    const float gk = g[k] / batch_f;
    const float mk = fmaf(kBeta1, m[k], (1.0f - kBeta1) * gk);
    const float vk = fmaf(kBeta2, v[k], ((1.0f - kBeta2) * gk) * gk);
    m[k] = mk;
    v[k] = vk;
    w[k] -= adam.lr * (mk / adam.bc1) / (sqrtf(vk / adam.bc2) + kEps);
  }
  if (t == 0) rv.row_loss[r] = loss;
}

__global__ void __launch_bounds__(kThreads)
sum_losses_kernel(const double* __restrict__ row_loss, uint32_t rows, double* out) {
  __shared__ double red[kThreads];
  double partial = 0;
  for (uint32_t r = threadIdx.x; r < rows; r += kThreads) partial += row_loss[r];
  red[threadIdx.x] = partial;
  block_tree_sum(red);
  if (threadIdx.x == 0) out[0] = red[0];
}

}  // namespace

void launch_train_rows(const RowsView& rows, const float* x, const float* y, uint32_t batch,
                       AdamStep adam, cudaStream_t stream) {
  if (rows.rows == 0) return;
  train_rows_kernel<<<rows.rows, kThreads, 0, stream>>>(rows, x, y, batch, adam);
  SG_CUDA_CHECK_LAUNCH();
}

void launch_sum_losses(const double* row_loss, uint32_t rows, double* out, cudaStream_t stream) {
  sum_losses_kernel<<<1, kThreads, 0, stream>>>(row_loss, rows, out);
  SG_CUDA_CHECK_LAUNCH();
}

}  // namespace shardguard::example
