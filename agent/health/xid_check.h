// The "xid" check: reads the kernel log lines written since its last run, picks out the
// NVIDIA driver's XID reports and classifies them (xid_table.h). A fatal XID (79: fallen off
// the bus) is a fatal finding; an unknown one a warning; application and informational XIDs
// are reported as evidence of an ok finding. Each line is reported once.
//
// Thread-safety: none; runs on the loop thread (HealthCheck).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "agent/health/health_check.h"
#include "agent/health/kernel_log.h"
#include "core/clock.h"

namespace shardguard::agent {

struct XidCheckConfig {
  std::vector<int> extra_fatal;
  std::vector<int> extra_ignored;
};

class XidCheck final : public HealthCheck {
 public:
  // `clock` (for "seen at" times) must outlive the check.
  XidCheck(XidCheckConfig config, std::unique_ptr<KernelLogReader> reader, const Clock& clock);

  std::string_view name() const override { return "xid"; }
  void run(Done done) override;

 private:
  XidCheckConfig config_;
  std::unique_ptr<KernelLogReader> reader_;
  const Clock& clock_;
};

}  // namespace shardguard::agent
