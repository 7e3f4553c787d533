// `shardguard run` end to end with real processes: kills, hangs, crash loops, SIGTERM, and
// the final weights compared bit for bit with an uninterrupted run.
#include <catch2/catch.hpp>

#include <filesystem>

#include "tests/run/run_fixture.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

const std::vector<std::string> kTrain = {"--steps", "300", "--rows", "64", "--log-every", "0",
                                         "--checkpoint-every", "50"};

// `base` with the options of `more` added, replacing the value of any already there.
std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& more) {
  for (size_t i = 0; i + 1 < more.size(); i += 2) {
    auto it = std::find(base.begin(), base.end(), more[i]);
    if (it != base.end() && it + 1 != base.end()) {
      *(it + 1) = more[i + 1];
    } else {
      base.push_back(more[i]);
      base.push_back(more[i + 1]);
    }
  }
  return base;
}

std::string run_log(const RunDirs& d) { return slurp(d.log()); }

// Pids of live processes started with SHARDGUARD_JOB_ID=`job` in their environment.
std::vector<int> processes_of_job(const std::string& job) {
  std::vector<int> out;
  const std::string entry = "SHARDGUARD_JOB_ID=" + job;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    const std::string env = slurp(e.path().string() + "/environ");
    size_t at = 0;
    while (at < env.size()) {
      const size_t end = env.find('\0', at);
      if (env.compare(at, (end == std::string::npos ? env.size() : end) - at, entry) == 0) {
        out.push_back(std::stoi(name));
        break;
      }
      if (end == std::string::npos) break;
      at = end + 1;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("kill -9 of one rank: every rank relaunched from the last commit, same weights",
          "[run][integration]") {
  RunDirs d;
  write_config(d);
  auto train = with(kTrain, {"--sleep-ms", "3"});
  Background run(run_argv(d, 2, train), d.log());
  // Wait for a committed checkpoint and rank 1's pid, then kill it.
  REQUIRE(eventually([&] { return !events_named(d, "checkpoint_committed").empty(); }, 20s));
  pid_t victim = 0;
  for (const auto& e : events_named(d, "hello"))
    if (field(e, "rank") == "1") victim = std::stoi(field(e, "pid"));
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGKILL) == 0);
  auto code = run.wait(60s);
  INFO(run_log(d));
  REQUIRE(code == 0);

  auto launches = events_named(d, "launch");
  REQUIRE(launches.size() == 2);
  CHECK(std::stoll(field(launches[1], "resume_step")) >= 50);
  auto ends = events_named(d, "attempt_end");
  REQUIRE(ends.size() == 2);
  CHECK(field(ends[0], "class") == "crash");
  CHECK_THAT(field(ends[0], "detail"), Catch::Contains("rank 1"));
  CHECK(final_hash(d.ckpt()) == reference_hash(kTrain));
}

TEST_CASE("SIGTERM to shardguard run: emergency checkpoint, exit 75, the next run resumes",
          "[run][integration]") {
  RunDirs d;
  // [stop] needs a grace too, so this config is written in full.
  std::ofstream(d.config()) << "[job]\ncheckpoint_dir = \"" << d.ckpt() << "\"\nrun_dir = \""
                            << d.run() << "\"\n[restart]\nbackoff_initial = \"10ms\"\n"
                            << "[stop]\ngrace = \"20s\"\nterm_grace = \"2s\"\n"
                            << "[checkpoint]\nevery_steps = 1000\n";
  auto train = with(kTrain, {"--sleep-ms", "5", "--checkpoint-every", "1000"});
  {
    Background run(run_argv(d, 2, train), d.log());
    REQUIRE(eventually([&] { return events_named(d, "hello").size() == 2; }, 20s));
    std::this_thread::sleep_for(300ms);
    run.signal(SIGTERM);
    auto code = run.wait(30s);
    INFO(run_log(d));
    REQUIRE(code == 75);
  }
  auto committed = events_named(d, "checkpoint_committed");
  REQUIRE(committed.size() == 1);
  auto ls = run_command(shardguard_bin() + " ckpt ls " + d.ckpt());
  CHECK_THAT(ls.out, Catch::Contains("emergency"));
  CHECK(events_named(d, "finish").back().fields.size() >= 2);

  // The next run (a new machine) resumes from the emergency checkpoint and finishes.
  Background again(run_argv(d, 2, train), d.log());
  REQUIRE(again.wait(60s) == 0);
  auto launches = events_named(d, "launch");
  REQUIRE(launches.size() == 2);
  CHECK(field(launches[1], "resume_step") == field(committed[0], "step"));
  CHECK(final_hash(d.ckpt()) == reference_hash(with(kTrain, {"--checkpoint-every", "1000"})));
}

TEST_CASE("A rank that stops heartbeating is detected, reported and relaunched",
          "[run][integration]") {
  RunDirs d;
  write_config(d, "[health]\nhang_timeout = \"1s\"\n");
  auto train = with(kTrain, {"--hang-at-step", "120", "--fault-rank", "1"});
  Background run(run_argv(d, 2, train), d.log());
  auto code = run.wait(60s);
  INFO(run_log(d));
  REQUIRE(code == 0);
  auto hangs = events_named(d, "hang");
  REQUIRE(hangs.size() == 1);
  CHECK(field(hangs[0], "rank") == "1");
  // The report is collected off the loop thread and recorded when written.
  auto reports = events_named(d, "hang_report");
  REQUIRE(reports.size() == 1);
  CHECK(field(reports[0], "rank") == "1");
  CHECK(std::filesystem::exists(field(reports[0], "report")));
  CHECK_THAT(slurp(field(reports[0], "report")), Catch::Contains("wchan"));
  CHECK(field(events_named(d, "attempt_end")[0], "class") == "hang");
  CHECK(final_hash(d.ckpt()) == reference_hash(kTrain));
}

TEST_CASE("A crash loop gives up with the diagnosis", "[run][integration]") {
  RunDirs d;
  write_config(d, "[restart.crash]\nmax_restarts = 2\nwindow = \"1h\"\n");
  auto train = with(kTrain, {"--fail-at-step", "70", "--fault-attempt", "-1", "--fail-code", "3"});
  Background run(run_argv(d, 1, train), d.log());
  auto code = run.wait(60s);
  INFO(run_log(d));
  REQUIRE(code == 76);
  auto give_up = events_named(d, "give_up");
  REQUIRE(give_up.size() == 1);
  CHECK(events_named(d, "launch").size() == 3);
  CHECK_FALSE(field(give_up[0], "why").empty());
}

TEST_CASE("Preemptions do not count against the crash budget", "[run][integration]") {
  RunDirs d;
  write_config(d, "[restart.crash]\nmax_restarts = 1\nwindow = \"1h\"\n", 20);
  // Every attempt is "preempted" (exit 75) 30 steps after it resumed; checkpoints every 20.
  auto train = with(kTrain, {"--checkpoint-every", "20", "--steps", "150", "--fail-after", "30",
                             "--fault-attempt", "-1", "--fail-code", "75"});
  Background run(run_argv(d, 1, train), d.log());
  auto code = run.wait(60s);
  INFO(run_log(d));
  REQUIRE(code == 0);
  CHECK(events_named(d, "launch").size() > 3);
  auto ends = events_named(d, "attempt_end");
  for (size_t i = 0; i + 1 < ends.size(); ++i) CHECK(field(ends[i], "class") == "preempted");
  CHECK(field(ends.back(), "class") == "success");
}

TEST_CASE("Teardown leaves no process of the tree behind", "[run][integration]") {
  RunDirs d;
  write_config(d);
  const std::string pid_file = d.tmp / "grandchild.pid";
  auto train = with(kTrain, {"--sleep-ms", "3", "--spawn-child", pid_file, "--fail-at-step",
                             "100", "--fault-rank", "1"});
  Background run(run_argv(d, 2, train), d.log());
  REQUIRE(eventually([&] { return std::filesystem::exists(pid_file) &&
                                  !slurp(pid_file).empty(); }, 20s));
  const std::string job = field(events_named(d, "start").front(), "job_id");
  auto code = run.wait(60s);
  INFO(run_log(d));
  REQUIRE(code == 0);
  // The sleeping grandchild of rank 0 (whose pid the rank sees in its own PID namespace
  // where the machine gives one) is gone with the tree: no process of this job is left.
  CHECK(processes_of_job(job).empty());
}

TEST_CASE("[[hooks]] commands run on lifecycle events with the fields in the environment",
          "[run][integration]") {
  RunDirs d;
  const std::string out = d.tmp / "hook.log";
  write_config(d, "[[hooks]]\nevent = \"restart\"\ncommand = [\"/bin/sh\", \"-c\", "
                  "\"echo restart $SHARDGUARD_EVENT_CLASS >> " + out + "\"]\ntimeout = \"5s\"\n"
                  "[[hooks]]\nevent = \"checkpoint_committed\"\ncommand = [\"/bin/sh\", \"-c\", "
                  "\"echo committed $SHARDGUARD_EVENT_STEP >> " + out + "\"]\n");
  auto train = with(kTrain, {"--fail-at-step", "120", "--fail-code", "3"});
  Background run(run_argv(d, 1, train), d.log());
  REQUIRE(run.wait(60s) == 0);
  REQUIRE(eventually([&] { return slurp(out).find("committed 300") != std::string::npos; }, 5s));
  const std::string log = slurp(out);
  CHECK_THAT(log, Catch::Contains("restart crash"));
  CHECK_THAT(log, Catch::Contains("committed 50"));
}

// Issue 26, item 3: `run` exited 75 1.1 s after the emergency commit, with 28 s of the
// deadline left, and killed the upload hook of that commit with no log line.
TEST_CASE("Hooks in flight at exit: the emergency commit's may use the rest of its deadline",
          "[run][integration]") {
  RunDirs d;
  const std::string out = d.tmp / "hook.log";
  std::ofstream(d.config())
      << "[job]\ncheckpoint_dir = \"" << d.ckpt() << "\"\nrun_dir = \"" << d.run() << "\"\n"
      << "[stop]\ngrace = \"8s\"\nterm_grace = \"2s\"\n"
      << "[checkpoint]\nevery_steps = 1000000\n"
      << "[[hooks]]\nevent = \"checkpoint_committed\"\ncommand = [\"/bin/sh\", \"-c\", "
      << "\"sleep 2; echo uploaded $SHARDGUARD_EVENT_STEP >> " + out + "\"]\n"
      << "[[hooks]]\nevent = \"preempt_notice\"\ncommand = [\"/bin/sleep\", \"60\"]\n"
               "timeout = \"90s\"\n";
  auto train = with(kTrain, {"--steps", "100000", "--sleep-ms", "2"});
  Background run(run_argv(d, 1, train), d.log());
  REQUIRE(eventually([&] { return !events_named(d, "hello").empty(); }, 20s));
  const auto t0 = std::chrono::steady_clock::now();
  run.signal(SIGTERM);
  auto code = run.wait(30s);
  const auto took = std::chrono::steady_clock::now() - t0;
  INFO(slurp(d.log()));
  REQUIRE(code == 75);  // preempted
  REQUIRE(events_named(d, "checkpoint_committed").size() == 1);
  const std::string step = field(events_named(d, "checkpoint_committed").front(), "step");
  // The upload finished before the exit; the hook that would outlive the deadline was killed
  // at it, and said so with its command and why.
  CHECK_THAT(slurp(out), Catch::Contains("uploaded " + step));
  // The hooks may run until the emergency's deadline for the ranks: the notice's (8 s after
  // the signal) less the 2 s safety margin.
  CHECK(took < 8s);
  CHECK(took > 5s);
  CHECK_THAT(slurp(d.log()), Catch::Contains("hook 'preempt_notice' command '/bin/sleep'") &&
                                 Catch::Contains("'/bin/sleep' '60'") &&
                                 Catch::Contains("killed with its process group") &&
                                 Catch::Contains("deadline came"));
}

TEST_CASE("A config error names the file, line and key; --check-config validates",
          "[run][integration]") {
  RunDirs d;
  std::ofstream(d.config()) << "[job]\nnproc = 2\n[checkpoint]\nevery = \"5 min\"\n";
  auto bad = run_command(shardguard_bin() + " run --config " + d.config() + " -- true");
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains(d.config() + ":4: checkpoint.every"));
  write_config(d);
  auto good = run_command(shardguard_bin() + " run --check-config --config " + d.config() + " -- true");
  CHECK(good.exit_code == 0);
  CHECK_THAT(good.out, Catch::Contains("config OK"));
  // What the ranks get: the lead less the 2 s safety margin (issue 26, item 5).
  CHECK_THAT(good.out, Catch::Contains("emergency save window: 28.00s for the ranks (the [stop] "
                                       "grace's 30.00s less the 2.00s [stop] safety_margin)"));
  auto slurm = run_command("env SLURM_JOB_ID=4711 SLURM_NNODES=1 SLURM_NODEID=0 "
                           "SBATCH_SIGNAL=USR1@12 " + shardguard_bin() +
                           " run --check-config --config " + d.config() + " -- true");
  CHECK_THAT(slurm.out, Catch::Contains("emergency save window: 10.00s for the ranks (the Slurm "
                                        "--signal lead's 12.00s"));
  // A save measured on this run directory is checked against it.
  std::filesystem::create_directories(d.run());
  std::ofstream(d.run() + "/events.jsonl")
      << R"({"time_unix_ms":1,"event":"checkpoint_committed","step":50,"seconds":"16.5"})" << "\n";
  auto measured = run_command(shardguard_bin() + " run --check-config --config " + d.config() +
                              " -- true");
  CHECK(measured.exit_code == 0);
  CHECK_THAT(measured.out, Catch::Contains("a save takes 16.50s, 59% of the 28.00s") &&
                               Catch::Contains("measured by an earlier run"));
}

TEST_CASE("A fatal XID in the kernel log stops the job with a checkpoint and exit 75",
          "[run][integration]") {
  RunDirs d;
  const std::string kmsg = d.tmp / "kmsg.log";
  spit(kmsg, "");
  write_config(d, "[health]\nkernel_log = \"" + kmsg + "\"\ncheck_interval = \"200ms\"\n"
                  "disk = false\nmemory = false\ngpu = false\n");
  auto train = with(kTrain, {"--steps", "100000", "--sleep-ms", "2"});
  Background run(run_argv(d, 2, train), d.log());
  REQUIRE(eventually([&] { return events_named(d, "hello").size() == 2; }, 20s));
  std::this_thread::sleep_for(500ms);
  std::ofstream(kmsg, std::ios::app)
      << "[12345.678] NVRM: Xid (PCI:0000:10:1c): 79, pid=4242, name=python, GPU has fallen off "
         "the bus.\n";
  auto code = run.wait(60s);
  INFO(slurp(d.log()));
  REQUIRE(code == 75);
  auto unhealthy = events_named(d, "node_unhealthy");
  REQUIRE(unhealthy.size() == 1);
  CHECK_THAT(field(unhealthy[0], "evidence"), Catch::Contains("79"));
  CHECK(field(events_named(d, "attempt_end").back(), "class") == "infrastructure");
  CHECK_THAT(run_command(shardguard_bin() + " ckpt ls " + d.ckpt()).out, Catch::Contains("emergency"));
}

TEST_CASE("A rank that fails before its first heartbeat: its log's last lines on the console",
          "[run][integration]") {
  RunDirs d;
  write_config(d, "[restart.crash]\nmax_restarts = 0\nwindow = \"1h\"\n");
  // What a Python rank does on a bad import: a traceback on stderr, exit 1, no heartbeat.
  std::vector<std::string> argv = {shardguard_bin(), "run", "--config", d.config(), "--nproc", "1",
                                   "--", "/bin/sh", "-c",
                                   "echo 'Traceback (most recent call last):' >&2; "
                                   "echo \"ModuleNotFoundError: No module named 'tourch'\" >&2; "
                                   "exit 1"};
  Background run(argv, d.log());
  auto code = run.wait(60s);
  const std::string log = run_log(d);
  INFO(log);
  REQUIRE(code == 76);
  CHECK_THAT(log, Catch::Contains("rank logs in " + d.run() + "/attempt-000/rank-*.log"));
  CHECK_THAT(log, Catch::Contains("rank 0 (exited with code 1) failed before its first heartbeat"));
  CHECK_THAT(log, Catch::Contains("  | ModuleNotFoundError: No module named 'tourch'"));
}

TEST_CASE("Each rank's environment carries the job's commit_timeout, and events.jsonl with a "
          "non-numeric attempt does not stop the next run",
          "[run][integration]") {
  RunDirs d;
  std::ofstream(d.config()) << "[job]\ncheckpoint_dir = \"" << d.ckpt() << "\"\n"
                            << "run_dir = \"" << d.run() << "\"\n"
                            << "[checkpoint]\ncommit_timeout = \"7s\"\n";
  // A hand-edited or foreign line in the timeline (finding: `stoull` threw on it).
  std::filesystem::create_directories(d.run());
  std::ofstream(d.run() + "/events.jsonl")
      << "{\"time_unix_ms\":1,\"event\":\"launch\",\"attempt\":\"seven\"}\n"
      << "not json at all\n";
  const std::string out = d.tmp / "env.txt";
  std::vector<std::string> argv = {shardguard_bin(), "run", "--config", d.config(), "--nproc", "1",
                                   "--", "/bin/sh", "-c",
                                   "echo \"$SHARDGUARD_COMMIT_TIMEOUT_MS\" > " + out};
  Background run(argv, d.log());
  const auto code = run.wait(60s);
  INFO(run_log(d));
  REQUIRE(code == 0);
  CHECK(slurp(out) == "7000\n");
}

TEST_CASE("Under Slurm with SBATCH_SIGNAL, an earlier run's save over half the signal's lead "
          "warns at start",
          "[run][integration]") {
  RunDirs d;
  write_config(d);
  // The run before this one on the run directory (a requeue) took 3 s to save.
  std::filesystem::create_directories(d.run());
  std::ofstream(d.run() + "/events.jsonl")
      << "{\"time_unix_ms\":1,\"event\":\"checkpoint_committed\",\"attempt\":0,\"step\":50,"
         "\"seconds\":3.0,\"bytes\":1,\"manifest\":\"m\"}\n";
  // A Slurm job's environment; the run ends with exit 0, so no scontrol is needed.
  std::string cmd = "env SLURM_JOB_ID=4711 SLURM_NNODES=1 SLURM_NODEID=0 SBATCH_SIGNAL=B:USR1@4 "
                    "SLURM_RESTART_COUNT=1";
  for (const auto& a : run_argv(d, 1, with(kTrain, {"--steps", "20"}))) cmd += " " + a;
  auto r = run_command(cmd);
  INFO(r.out + r.err);
  REQUIRE(r.exit_code == 0);
  auto w = events_named(d, "save_window");
  REQUIRE(w.size() == 1);
  CHECK(field(w[0], "when") == "start");
  CHECK(field(w[0], "source") == "Slurm --signal lead");
  // The ranks get the 4 s lead less the 2 s safety margin.
  CHECK(std::stod(field(w[0], "window_seconds")) == Approx(2.0));
  CHECK_THAT(r.out + r.err,
             Catch::Contains("150% of the 2.00s the Slurm --signal lead leaves the ranks (4.00s "
                             "less the 2.00s [stop] safety_margin)"));
}
