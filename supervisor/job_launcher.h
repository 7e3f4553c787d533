// JobLauncher: starts and stops the ranks of one node and reports their exits. Every rank
// runs in a process tree of its own that dies whole (LocalLauncher: process groups, every
// descendant, PDEATHSIG). A launcher never sends SIGTERM: the node runner tells ranks `stop` on
// the control socket and calls destroy() after the term grace (a SIGTERM from outside means
// "a notice"). Schedulers are not launchers: under Slurm or Kubernetes one `shardguard run`
// runs per node with a LocalLauncher.
// Thread-safety: loop thread only; callbacks run there.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/result.h"
#include "io/process.h"
#include "supervisor/machine_events.h"

namespace shardguard::supervisor {

struct RankLaunch {
  uint32_t rank = 0;        // global
  uint32_t local_rank = 0;
  io::ProcessSpec spec;
};

class JobLauncher {
 public:
  using ExitCallback = std::function<void(uint32_t rank, io::ExitStatus status)>;
  virtual ~JobLauncher() = default;

  // Starts the ranks of `epoch` on this node. On an error the ranks already started are
  // killed and the error names the rank and the command; its sys_errno() tells a transient
  // failure (EMFILE, ENFILE, EAGAIN, ENOMEM) from a permanent one. Exits are reported
  // through `on_exit` (each rank once), for ranks that end on their own and for killed ones.
  virtual Status launch(Epoch epoch, std::vector<RankLaunch> ranks, ExitCallback on_exit) = 0;
  // Kills every process of every rank of `epoch` still alive (whole trees) and calls `done`
  // once none is left (and every exit was reported).
  virtual void destroy(Epoch epoch, std::function<void()> done) = 0;
  // Sends `sig` to the rank's own process (its checkpoint signal). Not an error when gone.
  virtual void signal(uint32_t rank, int sig) = 0;
  // The pid of the rank's own process in the current epoch, if it runs.
  virtual std::optional<pid_t> pid_of(uint32_t rank) const = 0;
  // The process group of the rank (its tree), for hang reports.
  virtual std::optional<pid_t> group_of(uint32_t rank) const = 0;
  // Whether `pid` is the rank's process or one of its descendants (a control-socket peer
  // speaking for the rank must be).
  virtual bool owns(uint32_t rank, pid_t pid) const = 0;
};

}  // namespace shardguard::supervisor
