// Node health checks: the HealthCheck interface every check implements (GPU via NVML, XIDs
// from the kernel log, free disk, memory pressure, operator commands) and the HealthFinding
// each run produces. HealthMonitor (health_monitor.h) turns findings into healthy/unhealthy
// with thresholds and grace.
//
// Thread-safety: a check is run on the EventLoop thread and calls `done` there, once per
// run(), either inside run() or later. HealthFinding is a plain value.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardguard::agent {

struct HealthFinding {
  std::string check;  // "gpu", "xid", "disk", "memory", "command:<name>"
  enum Severity { kOk, kWarning, kFatal } severity = kOk;
  // What was seen, for logs and the events file: "GPU PCI:0000:10:1c: Xid 79 (GPU has fallen
  // off the bus) seen at 2026-01-02T03:04:05Z". May be empty for kOk.
  std::string evidence;
  // The check cannot run here (no NVML, no privilege to read /dev/kmsg): neither a success
  // nor a failure. `evidence` says why.
  bool not_available = false;
};

// "ok", "warning", "fatal".
std::string_view severity_name(HealthFinding::Severity severity);

// Builds one finding from several observations of one run: the worst severity, and the
// evidence of every observation at that severity joined by "; " (or `ok_evidence` if none).
class FindingBuilder {
 public:
  explicit FindingBuilder(std::string check) : check_(std::move(check)) {}
  void add(HealthFinding::Severity severity, std::string evidence);
  HealthFinding finish(std::string ok_evidence = {}) const;
  HealthFinding::Severity worst() const { return worst_; }

 private:
  std::string check_;
  HealthFinding::Severity worst_ = HealthFinding::kOk;
  std::vector<std::pair<HealthFinding::Severity, std::string>> items_;
};

// A finding that says the check cannot run here.
HealthFinding not_available_finding(std::string check, std::string why);

class HealthCheck {
 public:
  using Done = std::function<void(HealthFinding)>;
  virtual ~HealthCheck() = default;
  // Stable name, also HealthFinding::check: "gpu", "xid", "disk", "memory", "command:<name>".
  virtual std::string_view name() const = 0;
  // Looks once and calls `done` exactly once with the result, inline or later on the loop
  // thread. The monitor starts no run while the previous one is outstanding, unless that one
  // overran the policy's timeout (the check should then abandon it).
  virtual void run(Done done) = 0;
};

}  // namespace shardguard::agent
