#include "supervisor/rank_env.h"

#include <filesystem>

namespace shardguard::supervisor {

std::string absolute_path(const std::string& path) {
  std::error_code ec;
  auto abs = std::filesystem::absolute(path, ec);
  return ec ? path : abs.lexically_normal().string();
}

std::map<std::string, std::string> rank_environment(const RankEnvInputs& in, uint32_t rank,
                                                    uint32_t local_rank) {
  const JobConfig& c = in.config;
  std::map<std::string, std::string> env = c.env;
  const std::string r = std::to_string(rank), w = std::to_string(in.world_size);
  const std::string lr = std::to_string(local_rank), lw = std::to_string(in.local_world_size);
  env["SHARDGUARD_JOB_ID"] = c.job_id;
  env["SHARDGUARD_ATTEMPT"] = std::to_string(in.attempt);
  env["SHARDGUARD_RANK"] = r;
  env["SHARDGUARD_WORLD_SIZE"] = w;
  env["SHARDGUARD_LOCAL_RANK"] = lr;
  env["SHARDGUARD_NODE_RANK"] = std::to_string(in.node_rank);
  env["SHARDGUARD_NNODES"] = std::to_string(in.nnodes);
  env["RANK"] = r;
  env["WORLD_SIZE"] = w;
  env["LOCAL_RANK"] = lr;
  env["LOCAL_WORLD_SIZE"] = lw;
  env["GROUP_RANK"] = std::to_string(in.node_rank);
  env["MASTER_ADDR"] = in.master_addr;
  env["MASTER_PORT"] = std::to_string(in.master_port);
  // A bucket's URL as it is, with how to reach the bucket (never a credential: ranks find
  // their own as every AWS tool does); a directory's path made absolute.
  const bool bucket = storage::is_bucket_url(c.checkpoint_dir);
  env["SHARDGUARD_CHECKPOINT_DIR"] = bucket ? c.checkpoint_dir : absolute_path(c.checkpoint_dir);
  if (bucket)
    for (auto& [k, v] : storage::s3::s3_options_env(c.storage)) env[k] = v;
  env["SHARDGUARD_CONTROL_SOCKET"] = in.control_socket;
  env["SHARDGUARD_CHECKPOINT_SIGNAL"] = std::to_string(c.checkpoint_signal);
  env["SHARDGUARD_COMMIT_TIMEOUT_MS"] = std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(c.commit_timeout).count());
  if (c.interval_mode == IntervalMode::kSteps)
    env["SHARDGUARD_CHECKPOINT_EVERY_STEPS"] = std::to_string(c.every_steps);
  else
    env["SHARDGUARD_CHECKPOINT_EVERY_STEPS"] = "0";
  if (!in.resume_manifest.empty())
    env["SHARDGUARD_RESUME_MANIFEST"] =
        bucket ? in.resume_manifest : absolute_path(in.resume_manifest);
  if (in.skip_batches > 0) env["SHARDGUARD_SKIP_BATCHES"] = std::to_string(in.skip_batches);
  return env;
}

std::string control_socket_path(const std::string& run_dir) {
  // Always in the run directory, however long its path: the socket server and client reach
  // a path beyond sun_path's 107 bytes through the directory's descriptor. Never a name in a
  // shared /tmp, which another user could take first.
  return absolute_path(run_dir) + "/control.sock";
}

}  // namespace shardguard::supervisor
