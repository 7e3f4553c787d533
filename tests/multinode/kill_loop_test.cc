// The long form (label slow): a 3-node MIN:MAX job whose non-coordinator nodes are SIGKILLed
// whole at random moments and started again, again and again; every resume loads exactly what
// was saved, no step is committed twice, and the end is bit-identical to one rank alone.
// SHARDGUARD_DISRUPTIONS sets the number of kills (default 20); SHARDGUARD_SLOW_BOUNDED=1
// (scripts/test) caps it at 4. SHARDGUARD_TEST_SEED replays a run's choices.
#include <catch2/catch.hpp>
#include <random>
#include <thread>

#include "tests/multinode/checks.h"
#include "tests/multinode/cluster.h"

using namespace shardguard::testing::multinode;
using namespace std::chrono_literals;

namespace {

int disruption_count() {
  const char* n = std::getenv("SHARDGUARD_DISRUPTIONS");
  const int count = n != nullptr ? std::atoi(n) : 20;
  const char* bounded = std::getenv("SHARDGUARD_SLOW_BOUNDED");
  return bounded != nullptr && std::string(bounded) == "1" ? std::min(count, 4) : count;
}

uint32_t test_seed() {
  const char* s = std::getenv("SHARDGUARD_TEST_SEED");
  return s != nullptr ? static_cast<uint32_t>(std::strtoul(s, nullptr, 10))
                      : std::random_device{}();
}

size_t launches(const Cluster& c) { return of_type(c.events(), "launch").size(); }

}  // namespace

TEST_CASE("Nodes SIGKILLed whole and started again, over and over: bit-identical, fenced",
          "[multinode][slow]") {
  const int kills = disruption_count();
  const uint32_t seed = test_seed();
  INFO("SHARDGUARD_TEST_SEED=" << seed << ", " << kills << " kills");
  std::mt19937 rng(seed);
  ClusterOptions o;
  o.nodes = 3;
  o.nnodes = "2:3";
  // Enough steps for every kill (each cycle: a commit, the kill, the shrink, the return, the
  // growth), then the rest of the run undisturbed.
  o.trainer_args = {"--steps",     std::to_string(1000 + 700 * kills),
                    "--rows",      "64",
                    "--log-every", "0",
                    "--sleep-ms",  "5"};
  Cluster c(o);
  c.start_all();
  REQUIRE(wait_event_type(c, "launch", 60s));
  int done = 0;
  for (; done < kills; ++done) {
    // Training on all three nodes; let a checkpoint or two pass, a random while.
    const size_t before = launches(c);
    const size_t commits = of_type(c.events(), "checkpoint_committed").size();
    REQUIRE(wait_event_type(c, "checkpoint_committed", 60s, commits));
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 700));
    if (c.wait(0, 1ms) >= 0) break;  // the job ended first
    const int victim = 1 + static_cast<int>(rng() % 2);
    INFO("kill " << done << ": node " << victim);
    c.kill_node(victim);
    REQUIRE(wait_event_type(c, "launch", 60s, before));  // the survivors relaunched
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 1500));
    c.start(victim);
    REQUIRE(wait_event_type(c, "launch", 60s, before + 1));  // grown back (or ended)
  }
  CHECK(done == kills);
  REQUIRE(c.wait_all(0, 300s));
  check_history(c.events(), c.ckpt());
  const auto dumps = verify_resume_dumps(c.dump_dir());
  CHECK(dumps.size() >= static_cast<size_t>(2 * done));
  CHECK(final_hash(c.ckpt()) == row_parallel_reference(o.trainer_args));
}
