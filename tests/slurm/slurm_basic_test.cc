// Smoke tests of the Slurm fixture: batch jobs run and end as Slurm reports them, and
// several slurmd on one host make a real multi-node allocation.
#include <algorithm>
#include <sstream>

#include "tests/slurm/slurm_test_util.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

SlurmCluster& cluster() {
  static std::unique_ptr<SlurmCluster> c = start_cluster(SlurmOptions{});
  return *c;
}

}  // namespace

TEST_CASE("slurm: a one-node batch job runs and completes", "[integration]") {
  SG_SLURM_OR_SKIP();
  auto& c = cluster();
  REQUIRE(c.cancel_all_jobs().ok());
  const auto id = submit_or_fail(c,
                                 "#!/bin/bash\n"
                                 "echo \"hello $SLURMD_NODENAME $SLURM_JOB_NUM_NODES "
                                 "$SLURM_CLUSTER_NAME restart=${SLURM_RESTART_COUNT:-none}\"\n");
  const auto job = wait_state_or_fail(c, id, {"COMPLETED", "FAILED", "CANCELLED"}, 30s);
  CHECK(job.state() == "COMPLETED");
  CHECK(job.exit_code() == std::pair<int, int>{0, 0});
  CHECK(job.restarts() == 0);
  const std::string out = slurp(c.job_output_path(id));
  INFO(out);
  CHECK(out.find("hello " + job.batch_host() + " 1 " + c.cluster_name() + " restart=none") !=
        std::string::npos);
  // The job carries the fixture's marker (sbatch's default --export=ALL).
  CHECK((job.batch_host() == "n1" || job.batch_host() == "n2"));
}

TEST_CASE("slurm: a job exiting 75 with --requeue ends FAILED 75:0, not requeued",
          "[integration]") {
  SG_SLURM_OR_SKIP();
  auto& c = cluster();
  REQUIRE(c.cancel_all_jobs().ok());
  const auto id = submit_or_fail(c, "#!/bin/bash\nexit 75\n", {"--requeue"});
  const auto job = wait_state_or_fail(c, id, {"COMPLETED", "FAILED"}, 30s);
  CHECK(job.state() == "FAILED");
  CHECK(job.exit_code() == std::pair<int, int>{75, 0});
  CHECK(job.restarts() == 0);
  CHECK(job.get("Requeue") == "1");
}

TEST_CASE("slurm: srun -N2 runs one task per node; hostnames expand the node list",
          "[integration]") {
  SG_SLURM_OR_SKIP();
  auto& c = cluster();
  REQUIRE(c.cancel_all_jobs().ok());
  SECTION("srun from outside an allocation") {
    auto r = c.run({"srun", "-N2", "--ntasks-per-node=1", "bash", "-c",
                    "echo $SLURM_NODEID $SLURMD_NODENAME $SLURM_PROCID $SLURM_JOB_NODELIST "
                    "$SLURM_NNODES"},
                   60s);
    REQUIRE(r.ok());
    INFO(r->out << r->err);
    REQUIRE(r->exit_code == 0);
    std::vector<std::string> lines;
    std::istringstream in(r->out);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    std::sort(lines.begin(), lines.end());
    CHECK(lines == std::vector<std::string>{"0 n1 0 n[1-2] 2", "1 n2 1 n[1-2] 2"});
  }
  SECTION("srun inside an sbatch -N2 allocation") {
    const auto id = submit_or_fail(c,
                                   "#!/bin/bash\n"
                                   "echo batch $SLURMD_NODENAME $SLURM_JOB_NODELIST\n"
                                   "srun bash -c 'echo task $SLURM_NODEID $SLURMD_NODENAME' | "
                                   "sort\n",
                                   {"-N2", "--ntasks-per-node=1"});
    const auto job = wait_state_or_fail(c, id, {"COMPLETED", "FAILED"}, 60s);
    CHECK(job.state() == "COMPLETED");
    CHECK(job.node_list() == "n[1-2]");
    CHECK(job.batch_host() == "n1");
    CHECK(slurp(c.job_output_path(id)) == "batch n1 n[1-2]\ntask 0 n1\ntask 1 n2\n");
  }
  auto names = c.hostnames("n[1-2]");
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"n1", "n2"});
}
