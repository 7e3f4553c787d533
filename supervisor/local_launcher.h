// LocalLauncher: the JobLauncher of one machine, on io::ProcessLauncher. Each rank is started
// in its own process group with PDEATHSIG (it dies with the supervisor), in a PID namespace of
// its own where the machine permits (its init dies with the supervisor and takes the whole
// tree with it), and destroyed by SIGKILL of its whole tree - every descendant, found through
// /proc, not only its group - waiting until nothing of it is left. Each launched process is
// recorded (pid and start time) so that a later run sweeps leftovers of one that was killed.
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
  // `process_record`: the file launched processes are recorded in (empty: none).
  LocalLauncher(io::EventLoop& loop, io::ProcessLauncher& processes, std::string process_record = {});
  ~LocalLauncher() override;

  Status launch(Epoch epoch, std::vector<RankLaunch> ranks, ExitCallback on_exit) override;
  void destroy(Epoch epoch, std::function<void()> done) override;
  void signal(uint32_t rank, int sig) override;
  std::optional<pid_t> pid_of(uint32_t rank) const override;
  std::optional<pid_t> group_of(uint32_t rank) const override;
  bool owns(uint32_t rank, pid_t pid) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::supervisor
