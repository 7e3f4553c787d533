#include "examples/trainer/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace shardguard::example {

float learning_rate(const TrainConfig& c, uint64_t step) {
  if (step <= c.warmup) return c.lr * float(step) / float(std::max<uint64_t>(c.warmup, 1));
  const double progress = double(step - c.warmup) / double(std::max<uint64_t>(c.steps - c.warmup, 1));
  const double cosine = 0.5 * (1 + std::cos(M_PI * std::min(progress, 1.0)));
  return float(c.lr * (0.1 + 0.9 * cosine));
}

DataSet::DataSet(const TrainConfig& c) : in_dim_(c.in_dim), rows_(c.rows) {
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> truth(c.rows * c.in_dim);
  for (auto& t : truth) t = normal(rng);
  x_.resize(c.samples * c.in_dim);
  for (auto& x : x_) x = normal(rng);
  y_.resize(c.samples * c.rows);
  for (uint64_t s = 0; s < c.samples; ++s)
    for (uint64_t r = 0; r < c.rows; ++r) {
      float acc = 0;
      for (uint64_t k = 0; k < c.in_dim; ++k) acc += truth[r * c.in_dim + k] * x_[s * c.in_dim + k];
      y_[s * c.rows + r] = acc + 0.1f * normal(rng);
    }
}

DataLoader::DataLoader(const TrainConfig& c)
    : samples_(c.samples), batch_(c.batch), rng_(c.seed ^ 0x5eedULL) {
  reshuffle();
}

void DataLoader::reshuffle() {
  std::ostringstream state;
  state << rng_;
  epoch_start_state_ = state.str();
  order_.resize(samples_);
  for (uint64_t i = 0; i < samples_; ++i) order_[i] = i;
  // Fisher-Yates with the raw engine: std::shuffle's use of it is not specified.
  for (uint64_t i = samples_ - 1; i > 0; --i) std::swap(order_[i], order_[rng_() % (i + 1)]);
}

std::vector<uint64_t> DataLoader::next_batch() {
  std::vector<uint64_t> out;
  while (out.size() < batch_) {
    if (index_ == samples_) {
      ++epoch_;
      index_ = 0;
      reshuffle();
    }
    out.push_back(order_[index_++]);
  }
  return out;
}

std::string DataLoader::rng_state() const { return epoch_start_state_; }

std::string DataLoader::position_json() const {
  char buf[96];
  std::snprintf(buf, sizeof buf, "{\"epoch\":%llu,\"index\":%llu}",
                static_cast<unsigned long long>(epoch_), static_cast<unsigned long long>(index_));
  return buf;
}

bool DataLoader::restore(const std::string& rng_state, const std::string& position_json) {
  unsigned long long epoch = 0, index = 0;
  if (std::sscanf(position_json.c_str(), "{\"epoch\":%llu,\"index\":%llu}", &epoch, &index) != 2)
    return false;
  std::istringstream s(rng_state);
  std::mt19937_64 engine;
  s >> engine;
  if (!s) return false;
  if (index > samples_) return false;
  rng_ = engine;
  reshuffle();  // the current epoch's order, from the engine as it was before it
  epoch_ = epoch;
  index_ = index;
  return true;
}

Shard init_shard(const TrainConfig& c, uint64_t row0, uint64_t rows) {
  Shard s{row0, rows, c.in_dim, {}, {}, {}};
  s.w.assign(rows * c.in_dim, 0.0f);
  s.m.assign(rows * c.in_dim, 0.0f);
  s.v.assign(rows * c.in_dim, 0.0f);
  return s;
}

float lr_scale_from_global_loss(double global_loss) {
  if (!(global_loss > 0)) return 1.0f;
  return 1.0f / (1.0f + 1e-3f * float(std::log1p(global_loss)));
}

double train_step(const TrainConfig& c, const DataSet& data, const std::vector<uint64_t>& batch,
                  uint64_t step, Shard& shard, float lr_scale) {
  constexpr float kBeta1 = 0.9f, kBeta2 = 0.999f, kEps = 1e-8f;
  const float lr = learning_rate(c, step) * lr_scale;
  const float bc1 = 1.0f - std::pow(kBeta1, float(step));
  const float bc2 = 1.0f - std::pow(kBeta2, float(step));
  std::vector<float> grad(c.in_dim);
  double loss = 0;
  for (uint64_t r = 0; r < shard.rows; ++r) {
    float* w = &shard.w[r * c.in_dim];
    std::fill(grad.begin(), grad.end(), 0.0f);
    for (uint64_t s : batch) {
      const float* x = data.x(s);
      float pred = 0;
      for (uint64_t k = 0; k < c.in_dim; ++k) pred += w[k] * x[k];
      const float err = pred - data.y(s, shard.row0 + r);
      loss += double(err) * err;
      for (uint64_t k = 0; k < c.in_dim; ++k) grad[k] += err * x[k];
    }
    float* m = &shard.m[r * c.in_dim];
    float* v = &shard.v[r * c.in_dim];
    for (uint64_t k = 0; k < c.in_dim; ++k) {
      const float g = grad[k] / float(batch.size());
      m[k] = kBeta1 * m[k] + (1 - kBeta1) * g;
      v[k] = kBeta2 * v[k] + (1 - kBeta2) * g * g;
      w[k] -= lr * (m[k] / bc1) / (std::sqrt(v[k] / bc2) + kEps);
    }
  }
  return loss;
}

}  // namespace shardguard::example
