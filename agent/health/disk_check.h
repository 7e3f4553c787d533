// The "disk" check: free space on the filesystem holding the checkpoint directory (statvfs
// through Filesystem::free_space; the nearest existing ancestor while the directory does not
// exist yet). Below a fixed minimum is fatal, only when configured ([health] disk_fatal): a
// fixed default made every run on a small volume exit at once, and every requeue again.
// Less than one checkpoint (its size known from the newest complete one), below the warning
// level, or below headroom x the checkpoint size, is a warning. Less than one checkpoint is
// not fatal: retention may free room before the next save, and when it cannot, the run stops
// itself with 78 (supervisor/directory_keeper.h); an emergency stop would only move the job,
// with its full checkpoint volume, and repeat at every start (tests/run/enospc_test.cc).
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
  uint64_t fatal_bytes = 0;      // 0: only "less than one checkpoint" is fatal
  uint64_t checkpoint_size = 0;  // 0: unknown (then nothing is fatal but fatal_bytes)
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
