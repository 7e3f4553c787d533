// The example model: a multi-output linear regression y = W x whose rows are independent,
// trained with Adam on a synthetic data set. Each rank owns a block of rows, so ranks need
// no communication, and every row's arithmetic is the same whatever the partition: the
// final weights are bit-identical for any world size and any number of interruptions.
// Thread-safety: none needed (one training thread per rank).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace shardguard::example {

struct TrainConfig {
  uint64_t steps = 600;
  uint64_t rows = 512;     // outputs (rows of W), split across ranks
  uint64_t in_dim = 64;    // inputs
  uint64_t samples = 4096; // data set size
  uint64_t batch = 32;
  uint64_t seed = 1234;
  float lr = 0.01f;
  uint64_t warmup = 50;    // linear warm-up steps, then cosine decay to 10% at `steps`
};

// Learning rate at `step` (1-based): warm-up then cosine.
float learning_rate(const TrainConfig& c, uint64_t step);

// The synthetic data set, the same on every rank: inputs and the targets of all rows.
class DataSet {
 public:
  explicit DataSet(const TrainConfig& c);
  const float* x(uint64_t sample) const { return &x_[sample * in_dim_]; }
  float y(uint64_t sample, uint64_t row) const { return y_[sample * rows_ + row]; }

 private:
  uint64_t in_dim_, rows_;
  std::vector<float> x_, y_;
};

// Shuffles the sample order each epoch with an RNG whose state is saved in checkpoints.
class DataLoader {
 public:
  DataLoader(const TrainConfig& c);
  // The next batch of sample indices (crossing into a new, reshuffled epoch as needed).
  std::vector<uint64_t> next_batch();
  // State for the checkpoint: the RNG as it was before this epoch's shuffle, and the
  // position {"epoch":..,"index":..} in the epoch.
  std::string rng_state() const;
  std::string position_json() const;
  // Restores both; false if they do not parse.
  bool restore(const std::string& rng_state, const std::string& position_json);
  // Batches drawn since the start of training (epochs included): the next batch's number.
  uint64_t batches_drawn() const { return (epoch_ * samples_ + index_) / batch_; }

 private:
  void reshuffle();
  uint64_t samples_, batch_;
  std::mt19937_64 rng_;
  std::vector<uint64_t> order_;
  uint64_t epoch_ = 0, index_ = 0;
  std::string epoch_start_state_;
};

// This rank's rows of W with their Adam moments.
struct Shard {
  uint64_t row0 = 0, rows = 0, in_dim = 0;
  std::vector<float> w, m, v;
};

Shard init_shard(const TrainConfig& c, uint64_t row0, uint64_t rows);
// One Adam step on the owned rows for this batch; returns the rows' summed squared error.
// `lr_scale` multiplies the learning rate (1 unless the trainer all-reduces: then it comes from
// the previous step's loss summed over every rank, so every row depends on every rank).
double train_step(const TrainConfig& c, const DataSet& data, const std::vector<uint64_t>& batch,
                  uint64_t step, Shard& shard, float lr_scale = 1.0f);
// The learning-rate scale from the previous step's global loss (1 for none).
float lr_scale_from_global_loss(double global_loss);

}  // namespace shardguard::example
