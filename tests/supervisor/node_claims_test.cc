// What a remote node may say (issue 26, N4): a holder of the job's secret had reported steps
// for other nodes' ranks and claimed commits that the coordinator believed without reading
// the manifest. Here the decision core runs a 3-node attempt (2 ranks a node) in made-up
// time and a node's events go through RemoteNodeEvents as the coordinator's do.
#include "supervisor/node_claims.h"

#include <catch2/catch.hpp>

#include "core/filesystem.h"
#include "io/event_loop.h"
#include "storage/dir_store.h"
#include "tests/checkpoint/step_fixture.h"
#include "tests/supervisor/machine_driver.h"
#include "tests/support/manual_worker.h"
#include "tests/support/temp_dir.h"

using namespace shardguard;
using namespace shardguard::supervisor;
using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

MachineConfig three_nodes() {
  MachineConfig c;
  c.nproc_per_node = 2;
  c.min_nodes = 3;
  c.max_nodes = 3;
  c.join_window = 5s;
  return c;
}

// A running attempt: nodes 0, 1, 2 hold ranks 0-1, 2-3, 4-5.
void launch(MachineDriver& d) {
  d.start();
  for (NodeId n : {0u, 1u, 2u}) d.feed(event::NodeJoined{n, "host" + std::to_string(n)});
  d.resume(std::nullopt);
  d.launched();
  REQUIRE(d.world() == 6);
}

}  // namespace

TEST_CASE("a node speaks only for its own ranks of the running attempt", "[supervisor][unit]") {
  MachineDriver d(three_nodes());
  launch(d);
  const Epoch e = d.epoch();
  // Node 2's own ranks are 4 and 5.
  Event own = event::ShardWritten{e, 4, 50};
  CHECK_FALSE(check_node_claim(d.machine(), 2, own));
  Event foreign = event::ShardWritten{e, 0, 50};
  auto why = check_node_claim(d.machine(), 2, foreign);
  REQUIRE(why);
  CHECK_THAT(*why, Catch::Contains("node 2 spoke for rank 0"));
  // A heartbeat is cut down to the node's ranks: 9 M steps for rank 0 do not count.
  Event beats = event::Heartbeats{e, {{0, 9000000, {}}, {5, 120, {}}}, 9000000};
  CHECK_FALSE(check_node_claim(d.machine(), 2, beats));
  const auto& h = std::get<event::Heartbeats>(beats);
  REQUIRE(h.ranks.size() == 1);
  CHECK(h.ranks[0].rank == 5);
  CHECK_FALSE(h.all_ranks_at);
  Event only_foreign = event::Heartbeats{e, {{1, 9000000, {}}}, std::nullopt};
  CHECK(check_node_claim(d.machine(), 2, only_foreign));
  // A commit from a node that does not hold rank 0.
  Event commit = event::Committed{e, 50, "m", 0};
  CHECK(check_node_claim(d.machine(), 1, commit));
  CHECK_FALSE(check_node_claim(d.machine(), 0, commit));
  // Another attempt's events pass: the core ignores them itself.
  Event old = event::ShardWritten{e + 7, 0, 50};
  CHECK_FALSE(check_node_claim(d.machine(), 2, old));
}

TEST_CASE(
    "a claimed commit counts once it is read back; a false claim is refused and what the node "
    "said after it still arrives, in order",
    "[supervisor][unit]") {
  MachineDriver d(three_nodes());
  launch(d);
  const Epoch e = d.epoch();
  TempDir dir;
  // A real committed step 40 of this attempt (write_step's job is "crash-job").
  REQUIRE(write_step(PosixFilesystem::instance(), RealClock::instance(), dir.path(), 40, 6,
                     StepShape{12, 8}, e)
              .ok());
  storage::DirectoryStore store(PosixFilesystem::instance(), dir.path());
  io::EventLoop loop;
  io::AsioTimerFactory timers(loop);
  ManualWorker worker(loop);
  const std::string job = "crash-job";
  std::vector<Event> fed;
  std::vector<std::string> records;
  RemoteNodeEvents remote(
      worker, store, job, d.machine(), RealClock::instance(), timers,
      [&](Event ev) { fed.push_back(std::move(ev)); },
      [&](std::string_view type, const EventFields&) { records.emplace_back(type); });

  // Step 60 was never written: the claim waits for its read-back, the exit behind it too.
  remote.on_event(0, event::Committed{e, 60, "claimed", 0});
  remote.on_event(0, event::RankExited{e, 1, false, 0, 0, false, "exited with code 0"});
  CHECK(fed.empty());
  // A notice does not wait behind the read-back.
  event::Notice notice;
  notice.node = 1;
  remote.on_event(1, notice);
  REQUIRE(fed.size() == 1);
  CHECK(std::holds_alternative<event::Notice>(fed[0]));
  fed.clear();
  REQUIRE(worker.pending() == 1);
  worker.run_all();
  loop.run_for(100ms);
  REQUIRE(fed.size() == 1);
  CHECK(std::holds_alternative<event::RankExited>(fed[0]));
  CHECK(records == std::vector<std::string>{"commit_claim_rejected"});

  // Step 40 is there: the commit counts, with the manifest's size.
  remote.on_event(0, event::Committed{e, 40, "claimed", 0});
  worker.run_all();
  loop.run_for(100ms);
  REQUIRE(fed.size() == 2);
  const auto* c = std::get_if<event::Committed>(&fed[1]);
  REQUIRE(c);
  CHECK(c->step == 40);
  CHECK(c->bytes > 0);

  // A commit claimed by a node without rank 0 is refused before any read.
  remote.on_event(2, event::Committed{e, 40, "claimed", 0});
  CHECK(worker.pending() == 0);
  CHECK(records.back() == "node_claim_refused");
}
