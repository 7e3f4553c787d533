// Smoke tests of the Slurm fixture: batch jobs run and end as Slurm reports them, and
// several slurmd on one host make a real multi-node allocation.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "tests/slurm/slurm_test_util.h"
#include "tests/support/background.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

SlurmCluster& cluster() {
  static std::unique_ptr<SlurmCluster> c = [] {
    const auto t0 = std::chrono::steady_clock::now();
    auto started = start_cluster(SlurmOptions{});
    std::cout << "2-node cluster idle after "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
              << " s\n";
    return started;
  }();
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

TEST_CASE("slurm: sbatch --exclude keeps a job off a node", "[integration]") {
  SG_SLURM_OR_SKIP();
  auto& c = cluster();
  REQUIRE(c.cancel_all_jobs().ok());
  const auto id = submit_or_fail(c, "#!/bin/bash\necho $SLURMD_NODENAME\n", {"--exclude=n1"});
  const auto job = wait_state_or_fail(c, id, {"COMPLETED", "FAILED"}, 30s);
  CHECK(job.get("ExcNodeList") == "n1");
  CHECK(job.batch_host() == "n2");
}

TEST_CASE("slurm: stop() leaves no process and no directory; the sweep clears a dead run",
          "[integration]") {
  SG_SLURM_OR_SKIP();
  SECTION("stop() with a job running") {
    SlurmOptions options;
    options.nodes = 1;
    auto c = start_cluster(options);
    const auto id = submit_or_fail(*c, "#!/bin/bash\nsrun sleep 300 &\nsleep 300\n");
    wait_state_or_fail(*c, id, {"RUNNING"}, 30s);
    REQUIRE(eventually([&] { return c->job_pids(id).size() >= 3; }, 20s));
    const std::string dir = c->dir(), cluster = c->cluster_name();
    c->stop();
    CHECK(pids_with_env({"SHARDGUARD_SLURM_FIXTURE=" + dir}).empty());
    CHECK(pids_with_env({"SLURM_CLUSTER_NAME=" + cluster}).empty());
    CHECK(pids_with_open_file(dir).empty());
    CHECK_FALSE(std::filesystem::exists(dir));
  }
  SECTION("a crashed run's directory and processes") {
    // A "crashed" fixture: its owner pid is dead, a process of it still runs.
    const char* base = std::getenv("TMPDIR");
    std::string dir = std::string(base && *base ? base : "/tmp") + "/sg-slurm-XXXXXX";
    REQUIRE(::mkdtemp(dir.data()) != nullptr);
    const pid_t dead = ::fork();
    if (dead == 0) ::_exit(0);
    ::waitpid(dead, nullptr, 0);
    spit(dir + "/owner", std::to_string(dead) + " 1\n");
    auto orphan =
        spawn_process({"sleep", "300"}, {"SHARDGUARD_SLURM_FIXTURE=" + dir}, dir + "/sleep.log", 0);
    REQUIRE(orphan.ok());
    // Until the child has exec'd, its environment is still ours (no marker): the sweep would
    // not see it (a race seen once under load).
    REQUIRE(eventually(
        [&] { return !pids_with_env({"SHARDGUARD_SLURM_FIXTURE=" + dir}).empty(); }, 5s));
    SlurmCluster::sweep_stale();
    CHECK(wait_exit(*orphan, 5s));
    CHECK_FALSE(std::filesystem::exists(dir));
  }
}
