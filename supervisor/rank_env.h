// The environment each rank is started with (DESIGN.md section 4): shardguard's variables
// and torch's names, plus the job's own extra variables. Pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "supervisor/job_config.h"

namespace shardguard::supervisor {

struct RankEnvInputs {
  const JobConfig& config;
  uint64_t attempt;  // the epoch
  std::string resume_manifest;  // empty: fresh start
  std::string control_socket;
  uint32_t world_size = 1;
  uint32_t local_world_size = 1;
  uint32_t node_rank = 0;
  uint32_t nnodes = 1;
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 29500;
  uint64_t skip_batches = 0;  // SHARDGUARD_SKIP_BATCHES when > 0
};

// shardguard's variables and torch's (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// GROUP_RANK, MASTER_ADDR, MASTER_PORT) for global rank `rank`, local rank `local_rank`.
std::map<std::string, std::string> rank_environment(const RankEnvInputs& in, uint32_t rank,
                                                    uint32_t local_rank);

// <run_dir>/control.sock as an absolute path, however long (io/ binds and connects to a
// path beyond a socket address's 107 bytes through its directory).
std::string control_socket_path(const std::string& run_dir);

// Absolute form of `path` (relative to the current directory).
std::string absolute_path(const std::string& path);

}  // namespace shardguard::supervisor
