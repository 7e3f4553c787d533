// The supervisor's shell with real ranks (the example trainer) on a real loop, a fake clock
// for its timers and a worker that finishes nothing until the test says so: slow work (resume
// selection, commit read-backs) never keeps the loop from acting on a notice, and the ranks
// hear of an emergency checkpoint only once the space freed for it is free (on a small
// loop-mounted disk; skipped without root).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "core/exit_codes.h"
#include "io/deps.h"
#include "io/event_loop.h"
#include "io/http_client.h"
#include "io/process.h"
#include "supervisor/event_log.h"
#include "supervisor/supervisor.h"
#include "tests/support/loop_fs.h"
#include "tests/support/manual_worker.h"
#include "tests/support/temp_dir.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::supervisor;
using shardguard::testing::ManualWorker;
using shardguard::testing::TempDir;

namespace {

std::string trainer_bin() {
  const char* b = std::getenv("SG_TRAINER_BIN");
  return b ? b : "sg_trainer";
}

struct ShellFixture {
  TempDir dir;
  io::EventLoop loop;
  FakeClock clock;
  io::PosixProcessLauncher launcher{loop};
  io::BeastHttpClient http{loop};
  SeededRandom random{7};
  ManualWorker worker{loop};
  io::Deps deps{loop, clock, clock, PosixFilesystem::instance(), launcher, http, random, worker};

  JobConfig config(std::vector<std::string> trainer_args) {
    JobConfig c;
    c.job_id = "shell-test";
    c.nproc = 1;
    c.checkpoint_dir = dir / "ckpt";
    c.run_dir = dir / "run";
    c.command = {trainer_bin()};
    c.command.insert(c.command.end(), trainer_args.begin(), trainer_args.end());
    c.every_steps = 20;
    c.node_health.enabled = false;
    return c;
  }
  // Runs the loop (real time) until `pred` holds.
  template <typename Pred>
  bool run_until(Pred pred, Duration timeout) {
    return loop.run_until([&] { return pred(); }, timeout);
  }
  std::vector<EventRecord> events(const std::string& type) {
    std::vector<EventRecord> out;
    auto all = read_events(dir / "run/events.jsonl");
    if (all.ok())
      for (auto& e : *all)
        if (e.type == type) out.push_back(e);
    return out;
  }
};

std::string field(const EventRecord& e, const std::string& key) {
  for (const auto& [k, v] : e.fields)
    if (k == key) return v;
  return "";
}

agent::Notice sigterm(WallTime now) {
  agent::Notice n;
  n.source = "signal";
  n.kind = "sigterm";
  n.deadline = now + 30s;
  n.is_preemption = true;
  return n;
}

}  // namespace

TEST_CASE("shell: a notice while the resume checkpoint is still being looked for ends the job",
          "[supervisor][integration]") {
  ShellFixture f;
  Supervisor sup(f.deps, f.config({"--steps", "100000", "--sleep-ms", "5"}));
  REQUIRE(sup.start().ok());
  REQUIRE(f.worker.pending() == 1);  // the catalog scan is on the worker, not done
  sup.notice(sigterm(f.clock.wall_now()));
  CHECK(sup.finished());  // at once: nothing was running, nothing to save
  CHECK(sup.exit_code() == kExitPreempted);
  f.worker.run_all();
  f.loop.run_for(50ms);
  CHECK(f.events("launch").empty());
}

TEST_CASE("shell: a save of an earlier run that would not fit the emergency window warns at "
          "start",
          "[supervisor][integration]") {
  ShellFixture f;
  std::filesystem::create_directories(f.dir / "run");
  // The run before this one (a requeue on the same run directory) took 20 s to save.
  std::ofstream(f.dir / "run/events.jsonl")
      << "{\"time_unix_ms\":1,\"event\":\"launch\",\"attempt\":3}\n"
         "{\"time_unix_ms\":2,\"event\":\"checkpoint_committed\",\"attempt\":3,\"step\":40,"
         "\"seconds\":20.0,\"bytes\":1,\"manifest\":\"m\"}\n";
  JobConfig c = f.config({"--steps", "100000", "--sleep-ms", "5"});
  c.grace = 60s;
  c.agent.clouds = "none";
  c.slurm_signal_lead = 32s;  // what `shardguard run` reads from SBATCH_SIGNAL=B:USR1@32
  Supervisor sup(f.deps, c);
  REQUIRE(sup.start().ok());
  auto w = f.events("save_window");
  REQUIRE(w.size() == 1);
  CHECK(f.events("launch").size() == 1);  // the earlier run's: this one launched nothing yet
  CHECK(field(w[0], "when") == "start");
  CHECK(field(w[0], "source") == "Slurm --signal lead");
  // The ranks get the 32 s lead less the 2 s safety margin.
  CHECK_THAT(field(w[0], "warning"), Catch::Contains("67% of the 30.00s"));
  CHECK_THAT(sup.metrics_text(), Catch::Contains("shardguard_save_window_seconds 30.0"));
  CHECK_THAT(sup.metrics_text(), Catch::Contains("shardguard_save_window_fraction 0.666"));
  CHECK(std::stoull(field(f.events("start")[0], "first_attempt")) == 4);  // one read, both uses
  sup.notice(sigterm(f.clock.wall_now()));
  CHECK(sup.finished());
  f.worker.run_all();
  f.loop.run_for(50ms);
}

TEST_CASE("shell: a notice is acted on while a commit read-back holds the worker",
          "[supervisor][integration]") {
  ShellFixture f;
  Supervisor sup(f.deps, f.config({"--steps", "100000", "--sleep-ms", "5", "--log-every", "0"}));
  REQUIRE(sup.start().ok());
  // Slow work runs until rank 0 has committed step 20 on disk; from then on nothing the worker
  // holds (the read-back of that commit among it) finishes until the test says so.
  const std::string manifest20 = f.dir / "ckpt/step-000000020/manifest.json";
  REQUIRE(f.run_until(
      [&] {
        if (std::filesystem::exists(manifest20)) return true;
        f.worker.run_all();
        return false;
      },
      20s));
  f.loop.run_for(100ms);  // the claim arrives; its read-back waits
  CHECK(f.worker.pending() > 0);
  CHECK(f.events("checkpoint_committed").empty());
  sup.notice(sigterm(f.clock.wall_now()));
  auto requests = f.events("checkpoint_now");
  REQUIRE(requests.size() == 1);  // decided and sent while the worker is still busy
  CHECK(field(requests[0], "kind") == "emergency");
  // Let the slow work finish as it comes; the emergency checkpoint commits and the job stops.
  REQUIRE(f.run_until(
      [&] {
        f.worker.run_all();
        return sup.finished();
      },
      30s));
  CHECK(sup.exit_code() == kExitPreempted);
  // A rank already past at_step (heartbeats lag) makes the core pick a later one: the last.
  const uint64_t at = std::stoull(field(f.events("checkpoint_now").back(), "at_step"));
  auto commits = f.events("checkpoint_committed");
  REQUIRE(commits.size() >= 2);
  CHECK(field(commits.back(), "step") == std::to_string(at));
  auto fin = f.events("finish");
  REQUIRE(fin.size() == 1);
  CHECK(field(fin[0], "summary") == "emergency checkpoint of step " + std::to_string(at) + " committed");
}

TEST_CASE("shell: a claimed commit that is not on disk is not believed", "[supervisor][integration]") {
  ShellFixture f;
  // A "rank" that says hello and claims a commit of step 500 without writing anything.
  const std::string script = f.dir / "liar.py";
  std::ofstream(script) << R"(import json, os, socket, time
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["SHARDGUARD_CONTROL_SOCKET"])
def send(m):
    m["v"] = 2
    s.sendall((json.dumps(m) + "\n").encode())
send({"type": "hello", "rank": 0, "world_size": 1, "pid": os.getpid(),
      "job_id": os.environ["SHARDGUARD_JOB_ID"], "attempt": int(os.environ["SHARDGUARD_ATTEMPT"])})
send({"type": "checkpoint_committed", "step": 500, "manifest": "/etc/passwd"})
time.sleep(30)
)";
  JobConfig c = f.config({});
  c.command = {"/usr/bin/python3", script};
  Supervisor sup(f.deps, c);
  REQUIRE(sup.start().ok());
  REQUIRE(f.run_until(
      [&] {
        f.worker.run_all();
        return !f.events("commit_claim_rejected").empty();
      },
      20s));
  CHECK(f.events("checkpoint_committed").empty());
  CHECK_THAT(sup.metrics_text(), Catch::Contains("shardguard_last_committed_step 0"));
  CHECK_THAT(field(f.events("commit_claim_rejected")[0], "why"), Catch::Contains("not complete"));
}

TEST_CASE("shell: on a nearly full disk the emergency checkpoint is asked for once the space "
          "is free, not while it is being freed",
          "[supervisor][integration]") {
  std::string why;
  auto disk = shardguard::testing::LoopFs::mount(48, &why);
  if (!disk) {
    WARN("skipped: " << why);
    return;
  }
  ShellFixture f;
  const std::string ckpt = disk->path() + "/ckpt";
  const std::string step20 = ckpt + "/step-000000020";
  auto job = [&](uint64_t steps, uint32_t every) {
    JobConfig c = f.config({"--steps", std::to_string(steps), "--rows", "4096", "--sleep-ms", "5",
                            "--log-every", "0"});
    c.checkpoint_dir = ckpt;
    c.every_steps = every;
    c.keep_last = 1;
    c.keep_every = 20;  // steps 20 and 40 both stay
    return c;
  };
  auto finish = [&](Supervisor& sup) {
    return f.run_until(
        [&] {
          f.worker.run_all();
          return sup.finished();
        },
        60s);
  };
  {
    Supervisor first(f.deps, job(40, 20));
    REQUIRE(first.start().ok());
    REQUIRE(finish(first));
    REQUIRE(first.exit_code() == 0);
  }
  REQUIRE(std::filesystem::exists(step20 + "/manifest.json"));
  const uint64_t checkpoint =
      std::filesystem::file_size(step20 + "/shard-00000-of-00001.safetensors");

  Supervisor sup(f.deps, job(100000, 100000));
  REQUIRE(sup.start().ok());
  REQUIRE(f.run_until(
      [&] {
        f.worker.run_all();
        return f.events("ranks_ready").size() == 2;
      },
      20s));
  // A neighbour leaves half a checkpoint free; the notice comes.
  REQUIRE(disk->fill(checkpoint / 2));
  sup.notice(sigterm(f.clock.wall_now()));
  REQUIRE(f.events("checkpoint_now").size() == 1);  // decided at once
  REQUIRE(f.worker.pending() > 0);                  // the removal of step 20 waits on the worker
  f.loop.run_for(500ms);                            // the rank trains on, many steps
  CHECK(std::filesystem::exists(step20));
  CHECK(f.events("checkpoint_failed").empty());
  for (const auto& e : std::filesystem::directory_iterator(ckpt))
    CHECK(e.path().filename().string() <= "step-000000040");  // nothing written yet
  // The space is freed; only then the rank hears of the checkpoint, and it commits.
  REQUIRE(finish(sup));
  CHECK(sup.exit_code() == kExitPreempted);
  CHECK_FALSE(std::filesystem::exists(step20));
  CHECK(f.events("checkpoint_failed").empty());
  CHECK_THAT(field(f.events("finish").back(), "summary"),
             Catch::Matches("emergency checkpoint of step \\d+ committed"));
}
