// `shardguard run` as one node of a multi-node job (DESIGN.md 6b): node rank 0 (or, without
// --node-rank, the first to bind the rendezvous endpoint) runs the coordinator embedded beside
// its own ranks; every other node runs its ranks and follows the coordinator.
#pragma once

#include "cli/checkpoint_location.h"

#include <string>

#include "agent/scheduler_env.h"
#include "supervisor/job_config.h"

namespace shardguard::cli {

struct MultiNodeArgs {
  agent::Placement placement;
  OpenedLocation location;  // where checkpoints go (opened and probed by `run`)
  std::string node_address;  // where this node's ranks are reached; empty: as the coordinator sees it
  Duration join_window = std::chrono::seconds(0);
};

// Runs until the job ends; returns the exit code of `shardguard run`.
int run_multinode(const supervisor::JobConfig& config, const MultiNodeArgs& args);

}  // namespace shardguard::cli
