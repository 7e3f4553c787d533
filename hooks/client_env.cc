// Client options from the SHARDGUARD_* environment (DESIGN.md section 4).
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "hooks/client.h"
#include "hooks/client_internal.h"

namespace shardguard::hooks {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

Result<uint64_t> env_u64(const char* name, uint64_t fallback) {
  const char* v = env(name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || v[0] == '-')
    return Error(ErrorCode::kInvalid, std::string(name) + "='" + v + "' is not a number");
  return static_cast<uint64_t>(x);
}

}  // namespace

Result<int> parse_signal_name(std::string_view name) {
  static const std::pair<const char*, int> kSignals[] = {
      {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT},
      {"SIGHUP", SIGHUP},   {"SIGCONT", SIGCONT}, {"SIGURG", SIGURG},   {"SIGWINCH", SIGWINCH}};
  if (name == "none" || name == "0") return 0;
  if (!name.empty() && std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    int n = std::atoi(std::string(name).c_str());
    if (n > 0 && n < NSIG) return n;
  }
  for (const auto& [n, s] : kSignals)
    if (name == n || name == n + 3) return s;
  return Error(ErrorCode::kInvalid, "unknown signal '" + std::string(name) +
                                        "' (use SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGHUP, "
                                        "SIGCONT, SIGURG, SIGWINCH or none)");
}

Result<ClientOptions> options_from_env(ClientOptions o) {
  if (const char* v = env("SHARDGUARD_JOB_ID")) {
    o.job_id = v;
    o.under_shardguard = true;
  }
  // The supervisor's attempt, else the launcher's restart count (all ranks see the same).
  for (const char* name : {"SHARDGUARD_ATTEMPT", "TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"}) {
    if (env(name) == nullptr) continue;
    SG_ASSIGN_OR_RETURN(o.attempt, env_u64(name, o.attempt));
    o.attempts_numbered = true;
    break;
  }
  // torch's names first, ours win where both are set.
  SG_ASSIGN_OR_RETURN(uint64_t rank, env_u64("RANK", o.rank));
  SG_ASSIGN_OR_RETURN(rank, env_u64("SHARDGUARD_RANK", rank));
  SG_ASSIGN_OR_RETURN(uint64_t world, env_u64("WORLD_SIZE", o.world_size));
  SG_ASSIGN_OR_RETURN(world, env_u64("SHARDGUARD_WORLD_SIZE", world));
  SG_ASSIGN_OR_RETURN(uint64_t local, env_u64("LOCAL_RANK", o.local_rank));
  SG_ASSIGN_OR_RETURN(local, env_u64("SHARDGUARD_LOCAL_RANK", local));
  if (world == 0 || world > UINT32_MAX || rank >= world)
    return Error(ErrorCode::kInvalid, "rank " + std::to_string(rank) + " is outside world size " +
                                          std::to_string(world));
  o.rank = static_cast<uint32_t>(rank);
  o.world_size = static_cast<uint32_t>(world);
  o.local_rank = static_cast<uint32_t>(local);
  if (const char* v = env("SHARDGUARD_CHECKPOINT_DIR")) o.checkpoint_dir = v;
  if (const char* v = env("SHARDGUARD_RESUME_MANIFEST")) o.resume_manifest = v;
  if (const char* v = env("SHARDGUARD_CONTROL_SOCKET")) o.control_socket = v;
  if (const char* v = env("SHARDGUARD_CHECKPOINT_SIGNAL")) {
    SG_ASSIGN_OR_RETURN(o.checkpoint_signal, parse_signal_name(v));
  }
  // Opt out of (0) or into (1) catching SIGTERM; unset: caught under shardguard.
  if (const char* v = env("SHARDGUARD_HANDLE_SIGTERM")) {
    const std::string_view t = v;
    if (t != "0" && t != "1")
      return Error(ErrorCode::kInvalid,
                   "SHARDGUARD_HANDLE_SIGTERM='" + std::string(t) + "' must be 0 or 1");
    o.handle_sigterm = t == "1";
  }
  SG_ASSIGN_OR_RETURN(o.every_steps, env_u64("SHARDGUARD_CHECKPOINT_EVERY_STEPS", o.every_steps));
  SG_ASSIGN_OR_RETURN(o.staging_bytes, env_u64("SHARDGUARD_STAGING_BYTES", o.staging_bytes));
  SG_ASSIGN_OR_RETURN(o.skip_batches, env_u64("SHARDGUARD_SKIP_BATCHES", o.skip_batches));
  // The job's [checkpoint] commit_timeout, set by the supervisor.
  SG_ASSIGN_OR_RETURN(uint64_t commit_ms,
                      env_u64("SHARDGUARD_COMMIT_TIMEOUT_MS",
                              static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                        o.commit_timeout)
                                                        .count())));
  if (commit_ms == 0) return Error(ErrorCode::kInvalid, "SHARDGUARD_COMMIT_TIMEOUT_MS must be positive");
  o.commit_timeout = std::chrono::milliseconds(commit_ms);
  if (o.checkpoint_dir.empty())
    return Error(ErrorCode::kInvalid,
                 "no checkpoint directory: set SHARDGUARD_CHECKPOINT_DIR or pass one in code");
  // How to reach a bucket: what the supervisor resolved (SHARDGUARD_S3_*), else AWS's own.
  auto getenv = [&](std::string_view name) -> std::optional<std::string> {
    const char* v = env(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
  SG_ASSIGN_OR_RETURN(storage::s3::S3Options s3,
                      storage::s3::s3_options_from_env(getenv, std::move(o.s3)));
  o.s3 = std::move(s3);
  return o;
}

}  // namespace shardguard::hooks
