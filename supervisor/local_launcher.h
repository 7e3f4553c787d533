// LocalLauncher: the JobLauncher of one machine, on io::ProcessLauncher. Each rank is started
// in its own process group with PDEATHSIG (it dies with the supervisor) and destroyed by
// SIGKILL of its whole tree, waiting until nothing of it is left.
// Thread-safety: loop thread only.
#pragma once

#include <map>
#include <memory>

#include "supervisor/job_launcher.h"

namespace shardguard::io {
class EventLoop;
class ProcessLauncher;
}  // namespace shardguard::io

namespace shardguard::supervisor {

class LocalLauncher final : public JobLauncher {
 public:
  LocalLauncher(io::EventLoop& loop, io::ProcessLauncher& processes);
  ~LocalLauncher() override;

  Status launch(Epoch epoch, std::vector<RankLaunch> ranks, ExitCallback on_exit) override;
  void destroy(Epoch epoch, std::function<void()> done) override;
  void signal(uint32_t rank, int sig) override;
  std::optional<pid_t> pid_of(uint32_t rank) const override;
  std::optional<pid_t> group_of(uint32_t rank) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::supervisor
