// Randomness as an injected dependency (jitter of backoffs and polls): production draws from a
// seeded Mersenne Twister, tests from a fixed sequence. Thread-safety: one Random per thread
// (SeededRandom is not synchronised).
#pragma once

#include <cstdint>
#include <functional>
#include <random>

namespace shardguard {

class Random {
 public:
  virtual ~Random() = default;
  // A double in [0, 1].
  virtual double uniform01() = 0;
  // The same, as a function object for components that take one.
  std::function<double()> as_function() {
    return [this] { return uniform01(); };
  }
};

class SeededRandom final : public Random {
 public:
  explicit SeededRandom(uint64_t seed) : rng_(seed) {}
  // Seeded from std::random_device.
  SeededRandom() : rng_(std::random_device{}()) {}
  double uniform01() override { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

 private:
  std::mt19937_64 rng_;
};

}  // namespace shardguard
