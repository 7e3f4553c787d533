// A full disk, end to end: `shardguard run` over two ranks of the example trainer, writing its
// checkpoints to a small real ext4 (loop-mounted by tests/support/loop_fs.h) that really fills
// up, with the checkpoints' own bytes and a neighbour's file. Checked from the outside: the
// exit code, the log, events.jsonl, `shardguard ckpt ls/verify`, and a resume whose final
// weights must equal those of the same training run never interrupted.
//
// - The disk fills up mid-save and can never hold one more checkpoint (keep_last asks for
//   more than fits): the save fails with ENOSPC, the run stops at once with 78 naming the
//   disk, the partial step is never listed complete or resumed, the previous checkpoint
//   verifies; a requeue is refused at start (78); with space back the job resumes from the
//   previous checkpoint and ends bit-identical.
// - Retention makes room before the disk is full (keep_every milestones on a disk that holds
//   two and a half checkpoints): no save ever fails, the run ends bit-identical.
// - A notice (SIGTERM) arrives after a neighbour filled the disk: the supervisor frees an old
//   milestone, the emergency checkpoint commits (75), and the next run, on the same full
//   disk, makes room at start and ends bit-identical.
//
// Needs root and loop mounts: elsewhere each case says why and skips. The mounts are made in
// a mount namespace of this process where unshare is allowed, so a killed test leaves none
// behind on the host; LoopFs unmounts at the end of each case, failed or not.
#include <sched.h>
#include <sys/mount.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <sstream>

#include "core/exit_codes.h"
#include "tests/run/run_fixture.h"
#include "tests/support/loop_fs.h"

using namespace shardguard;
using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kDiskMiB = 48;
// 4096 rows of 64 floats with two Adam moments: about 3 MiB per checkpoint, in two shards.
const std::vector<std::string> kModel = {"--rows", "4096", "--log-every", "0"};

std::vector<std::string> train(uint64_t steps, uint64_t sleep_ms = 10) {
  std::vector<std::string> a = {"--steps", std::to_string(steps), "--sleep-ms",
                                std::to_string(sleep_ms)};
  a.insert(a.end(), kModel.begin(), kModel.end());
  return a;
}

// The uninterrupted run of 200 steps (one rank, no supervisor), made once: its final hash,
// and the size of one checkpoint.
struct Reference {
  std::string hash;
  uint64_t checkpoint_bytes = 0;
};

// `shardguard ckpt ls --json DIR`: step -> state.
std::map<uint64_t, std::string> listed(const std::string& dir) {
  std::map<uint64_t, std::string> out;
  const auto r = run_command(shardguard_bin() + " ckpt ls --json " + dir);
  if (r.exit_code != 0) return out;
  boost::system::error_code ec;
  auto v = boost::json::parse(r.out, ec);
  if (ec || !v.is_array()) return out;
  for (const auto& e : v.as_array())
    out[e.at("step").to_number<uint64_t>()] = std::string(e.at("state").as_string());
  return out;
}

uint64_t listed_bytes(const std::string& dir) {
  const auto r = run_command(shardguard_bin() + " ckpt ls --json " + dir);
  boost::system::error_code ec;
  auto v = boost::json::parse(r.out, ec);
  if (ec || !v.is_array() || v.as_array().empty()) return 0;
  return v.as_array()[0].at("bytes").to_number<uint64_t>();
}

const Reference& reference() {
  static const Reference ref = [] {
    Reference r;
    TempDir dir;
    std::string cmd = trainer_bin() + " --checkpoint-dir " + dir.path() + "/ckpt";
    for (const auto& a : train(200, 0)) cmd += " " + a;
    if (run_command(cmd).exit_code != 0) return r;
    r.hash = final_hash(dir.path() + "/ckpt");
    r.checkpoint_bytes = listed_bytes(dir.path() + "/ckpt");
    return r;
  }();
  return ref;
}

// Mounts of this process stay in this process (and its children) where it may have its own
// mount namespace; otherwise they are made on the host, and LoopFs still unmounts them.
void private_mounts() {
  static const bool once = [] {
    if (::unshare(CLONE_NEWNS) != 0) return false;
    return ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
  }();
  (void)once;
}

std::unique_ptr<LoopFs> small_disk() {
  if (::geteuid() != 0) {
    WARN("skipped: mounting a small filesystem needs root");
    return nullptr;
  }
  private_mounts();
  std::string why;
  auto disk = LoopFs::mount(kDiskMiB, &why);
  if (!disk) WARN("skipped: " << why);
  return disk;
}

void write_job(const RunDirs& d, const std::string& ckpt, const std::string& checkpoint_keys) {
  std::ofstream(d.config()) << "[job]\ncheckpoint_dir = \"" << ckpt << "\"\n"
                            << "run_dir = \"" << d.run() << "\"\n"
                            << "[restart]\nbackoff_initial = \"10ms\"\nbackoff_max = \"50ms\"\n"
                            << "[stop]\nterm_grace = \"2s\"\n"
                            << "[checkpoint]\n"
                            << checkpoint_keys;
}

// Whether one line of `text` holds every part, in order.
bool has_line(const std::string& text, const std::vector<std::string>& parts) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    size_t at = 0;
    bool all = true;
    for (const auto& p : parts) {
      at = line.find(p, at);
      if (at == std::string::npos) {
        all = false;
        break;
      }
      at += p.size();
    }
    if (all) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("The disk fills up mid-save and can never hold one more checkpoint: exit 78 at "
          "once, the partial step never resumed, the previous checkpoint intact",
          "[run][integration][enospc]") {
  const Reference& ref = reference();
  REQUIRE_FALSE(ref.hash.empty());
  REQUIRE(ref.checkpoint_bytes > (2u << 20));
  auto disk = small_disk();
  if (!disk) return;
  const uint64_t c = ref.checkpoint_bytes;
  // Room for two and a half checkpoints: steps 20 and 40 fit, step 60 does not, and
  // keep_last = 3 keeps both older ones.
  REQUIRE(disk->fill(2 * c + c / 2));
  RunDirs d;
  const std::string ckpt = disk->path() + "/ckpt";
  write_job(d, ckpt, "every_steps = 20\nkeep_last = 3\n");

  Background run(run_argv(d, 2, train(200)), d.log());
  const auto code = run.wait(60s);
  const std::string log = slurp(d.log());
  INFO(log);
  REQUIRE(code == kExitConfig);
  // The run's log says what happened, where, and what to do.
  CHECK_THAT(log, Catch::Contains("checkpoint of step 60 failed on rank"));
  CHECK_THAT(log, Catch::Contains(ckpt + "/step-000000060/shard-"));
  CHECK_THAT(log, Catch::Contains("No space left on device"));
  CHECK_THAT(log, Catch::Contains("the disk of '" + ckpt + "' can never hold one more checkpoint"));
  CHECK_THAT(log, Catch::Contains("keep_last = 3"));
  CHECK_THAT(log, Catch::Contains("(exit 78)"));
  // So do the events: the failure with its cause, one launch (no restart redoing the same
  // steps to fail the same way), nothing committed from step 60 on.
  auto failed = events_named(d, "checkpoint_failed");
  REQUIRE_FALSE(failed.empty());
  CHECK(field(failed[0], "step") == "60");
  CHECK(field(failed[0], "no_space") == "true");
  CHECK_THAT(field(failed[0], "error"), Catch::Contains("No space left on device"));
  CHECK(events_named(d, "launch").size() == 1);
  std::vector<std::string> committed;
  for (const auto& e : events_named(d, "checkpoint_committed"))
    committed.push_back(field(e, "step"));
  CHECK(committed == std::vector<std::string>{"20", "40"});
  REQUIRE(events_named(d, "finish").size() == 1);
  CHECK(field(events_named(d, "finish")[0], "exit_code") == "78");

  // Nothing partial is listed complete; the previous checkpoint verifies byte for byte.
  auto steps = listed(ckpt);
  INFO(run_command(shardguard_bin() + " ckpt ls " + ckpt).out);
  CHECK(steps[20] == "complete");
  CHECK(steps[40] == "complete");
  for (const auto& [step, state] : steps)
    if (step > 40) CHECK(state != "complete");
  const auto verify = run_command(shardguard_bin() + " ckpt verify " + ckpt + " --full");
  CHECK(verify.exit_code == 0);
  CHECK_THAT(verify.out, Catch::Contains("step 40: complete"));

  // A requeue on the same disk is refused at start, naming the sizes.
  const size_t before = slurp(d.log()).size();
  {
    Background again(run_argv(d, 2, train(200)), d.log());
    CHECK(again.wait(30s) == kExitConfig);
  }
  const std::string again_log = slurp(d.log()).substr(before);
  CHECK(has_line(again_log, {"requeueing will not help: the disk of '" + ckpt +
                                 "' can never hold one more checkpoint: ",
                             " free and 0 B that retention may remove", "keep_last = 3"}));
  CHECK(events_named(d, "launch").size() == 1);

  // Space is back (the neighbour's file is gone): the job resumes from step 40, the last
  // complete checkpoint, and ends as if nothing had happened.
  disk->unfill();
  {
    Background resumed(run_argv(d, 2, train(200)), d.log());
    REQUIRE(resumed.wait(60s) == 0);
  }
  auto launches = events_named(d, "launch");
  REQUIRE(launches.size() == 2);
  CHECK(field(launches[1], "resume_step") == "40");
  CHECK(final_hash(ckpt) == ref.hash);
}

TEST_CASE("Retention makes room before the disk is full: old milestones go, no save fails",
          "[run][integration][enospc]") {
  const Reference& ref = reference();
  REQUIRE_FALSE(ref.hash.empty());
  auto disk = small_disk();
  if (!disk) return;
  const uint64_t c = ref.checkpoint_bytes;
  REQUIRE(disk->fill(2 * c + c / 2));
  RunDirs d;
  const std::string ckpt = disk->path() + "/ckpt";
  // Every 40th step is a milestone retention keeps; on this disk two checkpoints fit.
  write_job(d, ckpt, "every_steps = 20\nkeep_last = 1\nkeep_every = 40\n");

  Background run(run_argv(d, 2, train(200)), d.log());
  const auto code = run.wait(60s);
  const std::string log = slurp(d.log());
  INFO(log);
  REQUIRE(code == 0);
  CHECK(events_named(d, "checkpoint_failed").empty());
  CHECK(events_named(d, "launch").size() == 1);
  CHECK(events_named(d, "checkpoint_committed").size() == 10);
  // After each milestone's successor commits, the milestone goes to make room.
  CHECK_THAT(log, Catch::Contains("retention frees"));
  CHECK(has_line(log, {"retention: remove step 40: complete, older than the newest 1 complete, "
                       "freeing ",
                       " for the next checkpoint"}));
  CHECK(final_hash(ckpt) == ref.hash);
  CHECK(run_command(shardguard_bin() + " ckpt verify " + ckpt + " --full").exit_code == 0);
}

TEST_CASE("A notice on a full disk: the supervisor frees an old checkpoint, the emergency "
          "checkpoint commits, the next run resumes from it bit-identical",
          "[run][integration][enospc]") {
  const Reference& ref = reference();
  REQUIRE_FALSE(ref.hash.empty());
  auto disk = small_disk();
  if (!disk) return;
  const uint64_t c = ref.checkpoint_bytes;
  RunDirs d;
  const std::string ckpt = disk->path() + "/ckpt";
  // Milestones every 20 steps: steps 20 and 40 both stay after the first run.
  write_job(d, ckpt, "every_steps = 20\nkeep_last = 1\nkeep_every = 20\n");
  {
    Background first(run_argv(d, 2, train(40)), d.log());
    REQUIRE(first.wait(60s) == 0);
  }
  REQUIRE(listed(ckpt) == (std::map<uint64_t, std::string>{{20, "complete"}, {40, "complete"}}));
  // From here on only notices and the end save.
  write_job(d, ckpt, "every_steps = 100000\nkeep_last = 1\nkeep_every = 20\n");

  Background second(run_argv(d, 2, train(200, 20)), d.log());
  // Both runs write to one events file: wait for this run's ranks.
  REQUIRE(eventually([&] { return events_named(d, "ranks_ready").size() == 2; }, 30s));
  // A neighbour fills the disk: half a checkpoint is left.
  REQUIRE(disk->fill(c / 2));
  second.signal(SIGTERM);
  const auto code = second.wait(60s);
  std::string log = slurp(d.log());
  INFO(log);
  REQUIRE(code == kExitPreempted);
  // Room was made first: step 40 is what the ranks resumed from, so step 20 went.
  CHECK(has_line(log, {"the disk under '" + ckpt + "' has ", " free, the checkpoint needs about ",
                       ": freeing "}));
  CHECK_FALSE(has_line(log, {"(not enough)"}));
  CHECK(has_line(log, {"retention: remove step 20: complete, older than the newest 1 complete, "
                       "freeing ",
                       " for an emergency save"}));
  auto finish = events_named(d, "finish");
  REQUIRE(finish.size() == 2);
  CHECK_THAT(field(finish[1], "summary"),
             Catch::Matches("emergency checkpoint of step \\d+ committed"));
  auto committed = events_named(d, "checkpoint_committed");
  REQUIRE(committed.size() == 3);
  const std::string emergency = field(committed.back(), "step");
  CHECK(std::stoull(emergency) > 40);
  CHECK(events_named(d, "checkpoint_failed").empty());
  CHECK(events_named(d, "node_unhealthy").empty());
  auto steps = listed(ckpt);
  CHECK(steps ==
        (std::map<uint64_t, std::string>{{40, "complete"}, {std::stoull(emergency), "complete"}}));
  CHECK(run_command(shardguard_bin() + " ckpt verify " + ckpt + " --full").exit_code == 0);

  // The next run starts on the same full disk: it frees step 40 (the emergency one is newer),
  // resumes from the emergency checkpoint, saves its last step and ends bit-identical. The
  // disk check sees less than one checkpoint free and only warns.
  {
    Background third(run_argv(d, 2, train(200, 0)), d.log());
    REQUIRE(third.wait(60s) == 0);
  }
  log = slurp(d.log());
  INFO(log);
  auto launches = events_named(d, "launch");
  REQUIRE(launches.size() == 3);
  CHECK(field(launches[2], "resume_step") == emergency);
  CHECK(has_line(log, {"retention: remove step 40: complete, older than the newest 1 complete, "
                       "freeing ",
                       " for the next checkpoint"}));
  CHECK(events_named(d, "checkpoint_failed").empty());
  CHECK(events_named(d, "node_unhealthy").empty());
  CHECK(final_hash(ckpt) == ref.hash);
}
