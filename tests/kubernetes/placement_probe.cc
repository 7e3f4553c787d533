// sg_placement_probe: prints where agent/scheduler_env places this process, from its own
// environment, as key=value lines (exit 0); `error=...` (exit 1) when it cannot;
// `single-node` (exit 2) when nothing asks for more than one node. Test-only: the manifest
// validation runs it with the environment each example pod would get. Slurm hostlists
// with brackets are not expanded here (no scontrol).
#include <cstdio>

#include "agent/scheduler_env.h"

using namespace shardguard;
using namespace shardguard::agent;

int main() {
  auto placed = resolve_placement(environment_snapshot(), {}, [](std::string_view list) {
    return Result<std::vector<std::string>>(
        Error(ErrorCode::kUnsupported, "the probe does not expand '" + std::string(list) + "'"));
  });
  if (!placed.ok()) {
    std::printf("error=%s\n", placed.error().message().c_str());
    return 1;
  }
  if (!placed->has_value()) {
    std::printf("single-node\n");
    return 2;
  }
  const Placement& p = **placed;
  std::printf("scheduler=%s\n", std::string(scheduler_name(p.scheduler)).c_str());
  std::printf("node_rank=%s\n", p.node_rank ? std::to_string(*p.node_rank).c_str() : "");
  std::printf("nnodes=%s\n", to_string(p.nnodes).c_str());
  std::printf("rdzv=%s\n", to_string(p.rdzv).c_str());
  std::printf("secret_file=%s\n", p.secret_file.c_str());
  std::printf("job_id_hint=%s\n", p.job_id_hint.c_str());
  if (p.scheduler_restarts) std::printf("scheduler_restarts=%u\n", *p.scheduler_restarts);
  return 0;
}
