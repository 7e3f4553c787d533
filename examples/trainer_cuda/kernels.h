// Launchers of sg_trainer_cuda's kernels (kernels.cu), callable from plain C++.
//
// Determinism: every row of W is updated by one thread block whose arithmetic depends only
// on the row's data, never on which rank owns it or how many rows the rank has: each thread
// sums a fixed, strided set of columns in order, the block combines the threads' partial
// sums with a fixed-shape tree in shared memory, and no atomics take part in any sum. So
// the weights are bit-identical between runs of this binary on the same GPU model, for any
// world size and any number of interruptions (a resumed row restarts from its exact saved
// bits). They need NOT equal the CPU trainer's (fused multiply-add, another summation
// order).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardguard::example {

// The per-step scalars, computed on the host exactly as the CPU trainer computes them.
struct AdamStep {
  float lr = 0;   // learning_rate(config, step)
  float bc1 = 1;  // 1 - beta1^step
  float bc2 = 1;  // 1 - beta2^step
};

struct RowsView {
  float* w = nullptr;        // rows x in_dim, row-major, device
  float* m = nullptr;        // Adam first moments, same layout
  float* v = nullptr;        // Adam second moments, same layout
  float* grad = nullptr;     // scratch, same layout
  double* row_loss = nullptr;  // rows: each row's summed squared error of the last step
  uint32_t rows = 0, in_dim = 0;
};

// One Adam step of every row on this batch. `x` is batch x in_dim (device), `y` is
// batch x rows (device; y[s * rows + r] is the target of local row r for sample s).
void launch_train_rows(const RowsView& rows, const float* x, const float* y, uint32_t batch,
                       AdamStep adam, cudaStream_t stream);

// out[0] = sum of row_loss[0 .. rows) in a fixed order (one block, no atomics).
void launch_sum_losses(const double* row_loss, uint32_t rows, double* out, cudaStream_t stream);

}  // namespace shardguard::example
