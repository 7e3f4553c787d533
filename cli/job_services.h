// What the process that runs the decision core serves for the whole job: the job's [[hooks]]
// (commands and webhooks on lifecycle events) and the Prometheus metrics endpoint. At exit
// the hooks in flight are waited for, not cut off (stop()).
// Thread-safety: loop thread only.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "core/result.h"
#include "io/deps.h"
#include "supervisor/job_config.h"
#include "supervisor/supervisor.h"

namespace shardguard::cli {

class JobServices {
 public:
  // Sees each lifecycle event before the hooks fire (the Slurm integration reads the job's
  // state on a notice).
  using Observer =
      std::function<void(std::string_view event, const std::map<std::string, std::string>&)>;

  // kInvalid: the hooks or the metrics address are wrong (a config error).
  static Result<std::unique_ptr<JobServices>> start(const io::Deps& deps,
                                                    const supervisor::JobConfig& config,
                                                    supervisor::Supervisor& shell,
                                                    Observer observer = {});
  ~JobServices();
  // At exit: lets the hook runs in flight finish, within their own limits and, after an
  // emergency checkpoint, by its deadline (an upload hook of the emergency commit may use the
  // rest of it); then kills what is left, logging each with why, and stops the metrics.
  // Runs the loop while it waits. Idempotent.
  void stop();

 private:
  struct Impl;
  explicit JobServices(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::cli
