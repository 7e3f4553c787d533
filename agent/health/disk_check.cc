#include "agent/health/disk_check.h"

#include "core/units.h"

namespace shardguard::agent {

DiskCheck::DiskCheck(DiskCheckConfig config, Filesystem& fs)
    : config_(std::move(config)), fs_(fs) {}

void DiskCheck::run(Done done) {
  if (config_.path.empty()) return done(not_available_finding("disk", "no checkpoint directory"));
  std::string path = config_.path;
  auto free = fs_.free_space(path);
  while (!free.ok() && free.error().code() == ErrorCode::kNotFound && path != "/" && path != ".") {
    path = parent_dir(path);  // not created yet: the space it will get is its parent's
    free = fs_.free_space(path);
  }
  HealthFinding f;
  f.check = "disk";
  if (!free.ok()) {
    f.severity = HealthFinding::kWarning;
    f.evidence = "checkpoint dir '" + config_.path + "': " + free.error().message();
    return done(std::move(f));
  }
  const uint64_t bytes = *free;
  f.evidence = "checkpoint dir '" + config_.path + "': " + format_size(bytes) + " free";
  const auto needed =
      static_cast<uint64_t>(static_cast<double>(config_.checkpoint_size) * config_.headroom);
  if (bytes < config_.fatal_bytes) {
    f.severity = HealthFinding::kFatal;
    f.evidence += ", below the hard minimum " + format_size(config_.fatal_bytes);
  } else if (config_.checkpoint_size > 0 && bytes < config_.checkpoint_size) {
    f.severity = HealthFinding::kWarning;
    f.evidence += ", less than one checkpoint (about " + format_size(config_.checkpoint_size) +
                  "): the next one fits only if retention frees room";
  } else if (bytes < config_.warning_bytes) {
    f.severity = HealthFinding::kWarning;
    f.evidence += ", below " + format_size(config_.warning_bytes);
  } else if (config_.checkpoint_size > 0 && bytes < needed) {
    f.severity = HealthFinding::kWarning;
    f.evidence += ", below " + format_size(needed) + " (checkpoints of about " +
                  format_size(config_.checkpoint_size) + ")";
  }
  done(std::move(f));
}

}  // namespace shardguard::agent
