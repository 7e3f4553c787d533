// What the process that runs the decision core serves for the whole job: the job's [[hooks]]
// (commands and webhooks on lifecycle events) and the Prometheus metrics endpoint.
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
  void stop();

 private:
  struct Impl;
  explicit JobServices(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::cli
