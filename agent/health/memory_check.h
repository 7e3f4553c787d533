// The "memory" check: host memory pressure from /proc/meminfo (MemAvailable / MemTotal
// below a fraction) and, where the kernel has PSI, /proc/pressure/memory ("some avg10", the
// share of the last 10 s in which some task stalled on memory, above a threshold). Either is
// a warning: a job about to be OOM-killed should checkpoint first. Parsers are exposed for
// tests. Thread-safety: parsers are pure; the check runs on the loop thread (HealthCheck).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "agent/health/health_check.h"
#include "core/filesystem.h"
#include "core/result.h"

namespace shardguard::agent {

struct MemInfo {
  uint64_t total_kib = 0;
  uint64_t available_kib = 0;  // MemAvailable, or MemFree + Buffers + Cached on old kernels
};

// kInvalid when MemTotal is missing or a value is not a number.
Result<MemInfo> parse_meminfo(std::string_view text);

struct PsiAverages {
  double avg10 = 0, avg60 = 0, avg300 = 0;  // percent
  uint64_t total_us = 0;
};
struct MemoryPressure {
  PsiAverages some;
  std::optional<PsiAverages> full;  // absent on kernels that print only "some"
};

// "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull ..."; kInvalid without a some line.
Result<MemoryPressure> parse_psi(std::string_view text);

struct MemoryCheckConfig {
  std::string meminfo_path = "/proc/meminfo";
  std::string psi_path = "/proc/pressure/memory";  // missing: PSI not used
  double min_available_fraction = 0.05;
  double max_psi_some_avg10 = 25.0;  // 0: PSI not used
};

class MemoryCheck final : public HealthCheck {
 public:
  // `fs` must outlive the check.
  MemoryCheck(MemoryCheckConfig config, Filesystem& fs);

  std::string_view name() const override { return "memory"; }
  void run(Done done) override;

 private:
  MemoryCheckConfig config_;
  Filesystem& fs_;
};

}  // namespace shardguard::agent
