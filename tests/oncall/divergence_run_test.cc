// Issue 14's divergence guard with real processes: `shardguard run` over the example trainer,
// whose rank 1 trains on a poisoned batch (--poison-batch: its weights turn to NaN, so every
// later loss is NaN, not only a reported one). With [guard] skip_batches the run rolls back to
// the checkpoint before the anomaly, sets aside the later ones, skips the bad batch on the
// relaunch and finishes with finite weights; without skipping, the same batch poisons the run
// again, it rolls back further, then gives up (exit 76) with the evidence quarantined.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

#include "core/exit_codes.h"
#include "tests/run/run_fixture.h"

using namespace shardguard;
using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

// Batch 54 is the one step 55 trains on (a fresh start draws batch s-1 at step s).
const std::vector<std::string> kTrain = {"--steps",     "130", "--rows",          "64",
                                         "--log-every", "10",  "--sleep-ms",      "10",
                                         "--poison-batch", "54", "--fault-rank", "1"};

std::string rank_logs(const RunDirs& d) {
  std::string all;
  for (const auto& e : std::filesystem::recursive_directory_iterator(d.run()))
    if (e.path().filename().string().rfind("rank-", 0) == 0 && e.path().extension() == ".log")
      all += "== " + e.path().string() + "\n" + slurp(e.path().string());
  return all;
}

uint64_t number(const supervisor::EventRecord& e, const std::string& key) {
  return std::stoull(field(e, key));
}

}  // namespace

TEST_CASE("divergence guard: NaN weights at step 55 -> rollback to step 40, later checkpoints "
          "quarantined, the bad batch skipped, the run finishes finite",
          "[oncall][integration]") {
  RunDirs d;
  write_config(d, "[guard]\nskip_batches = 30\n", 20);
  Background run(run_argv(d, 2, kTrain), d.log());
  const auto code = run.wait(90s);
  INFO(slurp(d.log()));
  INFO(rank_logs(d));
  REQUIRE(code == 0);

  auto div = events_named(d, "divergence");
  REQUIRE(div.size() == 1);
  CHECK(field(div[0], "rank") == "1");
  CHECK(field(div[0], "scalar") == "loss");
  CHECK(field(div[0], "rule") == "nonfinite");
  // The first NaN loss is step 56's, computed on the weights step 55 poisoned: the suspect
  // range starts at step 55 wherever the heartbeat window holding it began.
  CHECK(number(div[0], "step") > 40);
  CHECK(number(div[0], "step") <= 56);
  const uint64_t from = number(div[0], "quarantine_from");
  CHECK(from == 55);
  CHECK(field(div[0], "action") == "roll_back");

  auto rb = events_named(d, "guard_rollback");
  REQUIRE(rb.size() == 1);
  CHECK(field(rb[0], "to_step") == "40");
  CHECK(field(rb[0], "skip_batches") == "30");
  // Whatever committed at or after the anomaly (a save under way) was set aside.
  for (const auto& q : events_named(d, "quarantined")) CHECK(number(q, "step") >= from);
  auto launches = events_named(d, "launch");
  REQUIRE(launches.size() == 2);
  CHECK(field(launches[1], "resume_step") == "40");
  CHECK(field(launches[1], "skip_batches") == "30");
  auto end = events_named(d, "attempt_end");
  REQUIRE(end.size() == 2);
  CHECK(field(end[0], "class") == "divergence");

  // The relaunch skipped batches 40..69 (the poisoned 54 among them) and trained on finite
  // weights to the end.
  const std::string logs = rank_logs(d);
  CHECK(logs.find("skipping 30 data batches (SHARDGUARD_SKIP_BATCHES) from batch 40") !=
        std::string::npos);
  CHECK(logs.find("step 130 loss") != std::string::npos);
  const std::string attempt1 = slurp(d.run() + "/attempt-001/rank-1.log");
  CHECK(attempt1.find("poisoned") == std::string::npos);
  CHECK(attempt1.find("nan") == std::string::npos);
  auto ls = run_command(shardguard_bin() + " ckpt ls " + d.ckpt());
  INFO(ls.out << ls.err);
  CHECK(ls.out.find("130") != std::string::npos);
}

TEST_CASE("divergence guard: the same bad batch after each rollback -> rolls back further, "
          "then gives up with exit 76, the checkpoints set aside with the reason",
          "[oncall][integration]") {
  RunDirs d;
  write_config(d, "[guard]\nrollbacks = 2\n", 20);
  Background run(run_argv(d, 2, kTrain), d.log());
  const auto code = run.wait(90s);
  INFO(slurp(d.log()));
  REQUIRE(code == kExitGaveUp);

  auto div = events_named(d, "divergence");
  REQUIRE(div.size() == 3);
  CHECK(field(div[0], "action") == "roll_back");
  CHECK(field(div[1], "action") == "roll_back_further");
  CHECK(field(div[1], "quarantine_from") == "40");
  CHECK(field(div[2], "action") == "give_up");
  auto rb = events_named(d, "guard_rollback");
  REQUIRE(rb.size() == 2);
  CHECK(field(rb[0], "to_step") == "40");
  CHECK(field(rb[1], "to_step") == "20");
  std::set<uint64_t> aside;
  for (const auto& q : events_named(d, "quarantined")) aside.insert(number(q, "step"));
  CHECK(aside.contains(40));  // the second anomaly set aside the checkpoint rolled back to
  // Giving up sets aside only what came after the anomaly: the newest checkpoint before it
  // stays for a person to judge.
  CHECK_FALSE(aside.contains(20));
  auto give_up = events_named(d, "give_up");
  REQUIRE(give_up.size() == 1);
  CHECK(field(give_up[0], "class") == "divergence");
  CHECK(field(give_up[0], "why").find("3 anomalies, 2 rollback(s)") != std::string::npos);

  // The evidence is listed with its reason, and the incident report tells the story.
  auto ls = run_command(shardguard_bin() + " ckpt ls " + d.ckpt());
  INFO(ls.out << ls.err);
  CHECK(ls.out.find("divergence guard: rank 1: loss NaN or Inf") != std::string::npos);
  auto report = run_command(shardguard_bin() + " report --run-dir " + d.run());
  INFO(report.out << report.err);
  CHECK(report.exit_code == 0);
  CHECK(report.out.find("divergence") != std::string::npos);
}
