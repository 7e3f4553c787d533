// The "disk" check: free space on the filesystem holding the checkpoint directory (statvfs
// through Filesystem::free_space; the nearest existing ancestor while the directory does not
// exist yet). Below the hard minimum is fatal: the next checkpoint cannot be written. Below
// the warning level, or below headroom x the estimated checkpoint size, is a warning.
//
// Thread-safety: none; runs on the loop thread (HealthCheck).
#pragma once

#include <cstdint>
#include <string>

#include "agent/health/health_check.h"
#include "core/filesystem.h"

namespace shardguard::agent {

struct DiskCheckConfig {
  std::string path;  // the checkpoint directory; empty: not available
  uint64_t warning_bytes = 10ull << 30;
  uint64_t fatal_bytes = 1ull << 30;
  uint64_t checkpoint_size = 0;  // 0: unknown
  double headroom = 2.0;
};

class DiskCheck final : public HealthCheck {
 public:
  // `fs` must outlive the check.
  DiskCheck(DiskCheckConfig config, Filesystem& fs);

  std::string_view name() const override { return "disk"; }
  void run(Done done) override;
  // Updates the checkpoint size estimate (e.g. the last committed checkpoint's bytes).
  void set_checkpoint_size(uint64_t bytes) { config_.checkpoint_size = bytes; }

 private:
  DiskCheckConfig config_;
  Filesystem& fs_;
};

}  // namespace shardguard::agent
