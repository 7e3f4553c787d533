// A 3-node job in Linux network namespaces (tests/support/netns.h: one namespace per node,
// veths to a bridge, real TCP between 10.x.y.z addresses): node 2 partitioned with iptables
// DROP is declared lost after ~3 s of silence and the survivors relaunch; its ranks, cut off,
// keep training in their stale epoch; healed, the node rejoins, its stale ranks are stopped,
// the job grows back at a checkpoint and ends bit-identical. Over the whole history no step is
// committed twice and no epoch publishes outside its own lifetime (the stale node included).
// Root only: skips with a warning where namespaces cannot be made.
#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/multinode/checks.h"
#include "tests/multinode/cluster.h"
#include "tests/support/netns.h"
#include "tests/support/proc_tools.h"

using namespace shardguard::testing;
using namespace shardguard::testing::multinode;
using namespace std::chrono_literals;

TEST_CASE(
    "A partitioned node (iptables DROP) is lost after ~3 s, the survivors relaunch; healed, it "
    "rejoins, the job grows and ends bit-identical; no two epochs commit one step",
    "[multinode][integration][netns]") {
  if (auto why = NetnsNetwork::unavailable_reason()) {
    WARN("SKIPPED: " << *why);
    return;
  }
  const auto ip = find_program("ip");
  REQUIRE(ip);
  auto made = NetnsNetwork::create({3, 214, static_cast<int>(::getpid() % 250) + 1});
  REQUIRE(made.ok());
  NetnsNetwork& net = **made;

  ClusterOptions o;
  o.nodes = 3;
  o.nnodes = "2:3";
  o.trainer_args = {"--steps", "1500", "--rows", "64", "--log-every", "0", "--sleep-ms", "5"};
  o.address = [&](int k) { return net.address(k); };
  o.rdzv_host = net.address(0);
  o.wrap = [&](int k, std::vector<std::string> argv) {
    std::vector<std::string> out = {*ip, "netns", "exec", net.name(k)};
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  };
  Cluster c(o);
  c.start_all();
  REQUIRE(wait_event_type(c, "checkpoint_committed", 60s));

  const int64_t before = wall_ms_now();
  REQUIRE(net.partition(2, PartitionMethod::kIptablesDrop).ok());
  const int64_t after = wall_ms_now();
  const auto lost = wait_event_type(c, "node_lost", 20s);
  REQUIRE(lost);
  CHECK(field(*lost, "node") == "2");
  CHECK_THAT(field(*lost, "why"), Catch::Contains("no heartbeat for 3000 ms"));
  INFO("declared lost " << lost->time_unix_ms - after << " to " << lost->time_unix_ms - before
                        << " ms after the partition");
  // 3 s of silence from the node's last message (a heartbeat at least every second).
  CHECK(lost->time_unix_ms - before >= 2000);
  CHECK(lost->time_unix_ms - after <= 4500);
  const auto shrunk = wait_event_type(c, "launch", 30s, 1);
  REQUIRE(shrunk);
  CHECK(field(*shrunk, "nodes") == "0,1");

  // Cut off, node 2's rank of epoch 0 still trains (and saves its shard of later steps): it
  // must never publish. Let the 2-node epoch commit meanwhile.
  const auto stale = pids_with_env(
      {"SHARDGUARD_JOB_ID=" + c.job_id(), "SHARDGUARD_ATTEMPT=0", "SHARDGUARD_RANK=2"});
  CHECK(stale.size() == 1);
  REQUIRE(wait_event(
      c,
      [](const EventRecord& e) {
        return e.type == "checkpoint_committed" && field(e, "attempt") == "1";
      },
      30s));
  REQUIRE(net.heal(2).ok());
  const bool rejoined = eventually(
      [&] {
        int joins = 0;
        for (const auto& e : of_type(c.events(), "node_joined")) joins += field(e, "node") == "2";
        return joins >= 2;
      },
      30000ms);
  REQUIRE(rejoined);
  const auto grown = wait_event_type(c, "launch", 30s, 2);
  REQUIRE(grown);
  CHECK(field(*grown, "nodes") == "0,1,2");
  for (pid_t p : stale) CHECK(eventually([&] { return !process_alive(p); }, 10000ms));

  REQUIRE(c.wait_all(0, 120s));
  const auto events = c.events();
  check_history(events, c.ckpt());
  verify_resume_dumps(c.dump_dir());
  CHECK(final_hash(c.ckpt()) == row_parallel_reference(o.trainer_args));
}
