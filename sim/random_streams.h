// Seeded random streams for the simulator. Each process (a node slot's failures, the
// preemption of its machines, the supervisor's backoff jitter) draws from its own stream
// derived from (seed, purpose, index), so changing the policy or the interval never shifts
// another process's draws: every policy meets the same fleet (common random numbers).
// Thread-safety: one Stream per user.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace shardguard::sim {

// SplitMix64: a good 64-bit mixer for deriving independent seeds.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t derive_seed(uint64_t seed, uint64_t purpose, uint64_t index = 0) {
  return mix64(mix64(mix64(seed) ^ purpose) ^ index);
}

class Stream {
 public:
  explicit Stream(uint64_t seed) : rng_(seed) {}
  // Uniform in (0, 1): never exactly 0, so -log(u) is finite.
  double uniform() {
    const double u = double(rng_() >> 11) * 0x1.0p-53;
    return u > 0 ? u : 0x1.0p-54;
  }
  // Exponential with `rate` per second; infinity for a zero rate.
  double exponential(double rate) {
    return rate > 0 ? -std::log(uniform()) / rate : std::numeric_limits<double>::infinity();
  }
  uint64_t below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

 private:
  std::mt19937_64 rng_;
};

// Purposes (stream families).
inline constexpr uint64_t kFailureStream = 1, kPreemptionStream = 2, kJitterStream = 3,
                          kTraceStream = 4, kCapacityStream = 5;

}  // namespace shardguard::sim
