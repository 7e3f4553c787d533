// CommandCheck with real processes on a real EventLoop: exit codes, launch failures, and a
// hanging command whose whole process group is killed at the timeout. Also the monitor as
// make_health_monitor() builds it, on fake files.
#include "agent/health/command_check.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <optional>
#include <sstream>

#include "agent/health/disk_check.h"
#include "agent/health/health_setup.h"
#include "io/deps.h"
#include "io/event_loop.h"
#include "io/http_client.h"
#include "io/process.h"
#include "io/thread_worker.h"
#include "tests/support/temp_dir.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::agent;
using shardguard::testing::TempDir;

namespace {

bool proc_exists(pid_t pid) { return std::filesystem::exists("/proc/" + std::to_string(pid)); }

struct CommandFixture {
  io::EventLoop loop;
  io::AsioTimerFactory timers{loop};
  io::PosixProcessLauncher launcher{loop};
  io::BeastHttpClient http{loop};
  SeededRandom random{1};
  io::ThreadWorker worker{loop};
  TempDir dir;

  // The dependency bundle with `clock` as the clock and the timers.
  io::Deps deps(FakeClock& clock) {
    return io::Deps{loop, clock, clock, PosixFilesystem::instance(), launcher, http, random, worker};
  }

  CommandFixture() { REQUIRE(io::become_child_subreaper().ok()); }

  CommandCheckSettings settings(std::vector<std::string> argv) {
    CommandCheckSettings s;
    s.name = "probe";
    s.argv = std::move(argv);
    s.timeout = 10s;
    return s;
  }
  // Runs the check once and waits (real time) for its answer.
  HealthFinding run(CommandCheck& check) {
    std::optional<HealthFinding> got;
    check.run([&](HealthFinding f) { got = std::move(f); });
    REQUIRE(loop.run_until([&] { return got.has_value(); }, 20s));
    return *got;
  }
};

}  // namespace

TEST_CASE("command check: exit 0 is ok", "[integration]") {
  CommandFixture f;
  CommandCheck check(f.settings({"true"}), f.loop, f.launcher, f.timers);
  CHECK(check.name() == "command:probe");
  HealthFinding got = f.run(check);
  CHECK(got.check == "command:probe");
  CHECK(got.severity == HealthFinding::kOk);
  CHECK(got.evidence == "'true': exited with code 0");
}

TEST_CASE("command check: a non-zero exit is a failure with the output's last line",
          "[integration]") {
  CommandFixture f;
  CommandCheckSettings s =
      f.settings({"sh", "-c", "echo starting; echo 'ECC check failed' >&2; exit 3"});
  s.output_file = f.dir / "probe.log";
  CommandCheck check(s, f.loop, f.launcher, f.timers);
  HealthFinding got = f.run(check);
  CHECK(got.severity == HealthFinding::kWarning);
  CHECK(got.evidence.find("exited with code 3") != std::string::npos);
  CHECK(got.evidence.find("(last output: 'ECC check failed')") != std::string::npos);
  // The log keeps growing; each run quotes only its own output.
  CommandCheck quiet(f.settings({"false"}), f.loop, f.launcher, f.timers);
  CHECK(f.run(quiet).evidence == "'false': exited with code 1");
}

TEST_CASE("command check: a program that cannot be launched is a failure", "[integration]") {
  CommandFixture f;
  CommandCheck check(f.settings({"/nonexistent/probe"}), f.loop, f.launcher, f.timers);
  HealthFinding got = f.run(check);
  CHECK(got.severity == HealthFinding::kWarning);
  CHECK(got.evidence.find("/nonexistent/probe") != std::string::npos);
}

TEST_CASE("command check: a hanging command's whole group is killed at the timeout",
          "[integration]") {
  CommandFixture f;
  const std::string pids = f.dir / "pids";
  // Both processes ignore SIGTERM (SIG_IGN survives exec), so only SIGKILL ends them.
  CommandCheckSettings s =
      f.settings({"sh", "-c", "trap '' TERM; sleep 100 & echo $$ $! > " + pids + "; wait"});
  s.timeout = 500ms;
  s.kill_grace = 200ms;
  CommandCheck check(s, f.loop, f.launcher, f.timers);
  const auto start = std::chrono::steady_clock::now();
  HealthFinding got = f.run(check);
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(got.severity == HealthFinding::kWarning);
  CHECK(got.evidence.find("timed out after 500ms; process group killed") != std::string::npos);
  CHECK(took >= 700ms);
  CHECK(took < 10s);
  pid_t shell = 0, sleeper = 0;
  std::istringstream(testing::slurp(pids)) >> shell >> sleeper;
  REQUIRE(shell > 0);
  REQUIRE(sleeper > 0);
  CHECK_FALSE(proc_exists(shell));
  CHECK_FALSE(proc_exists(sleeper));
}

TEST_CASE("command check: what a successful command leaves behind is reaped", "[integration]") {
  CommandFixture f;
  const std::string pids = f.dir / "pids";
  CommandCheck check(f.settings({"sh", "-c", "sleep 100 & echo $! > " + pids}), f.loop, f.launcher,
                     f.timers);
  HealthFinding got = f.run(check);
  CHECK(got.severity == HealthFinding::kOk);
  pid_t sleeper = 0;
  std::istringstream(testing::slurp(pids)) >> sleeper;
  REQUIRE(sleeper > 0);
  CHECK_FALSE(proc_exists(sleeper));
}

TEST_CASE("command check: destroying the check mid-run kills the command", "[integration]") {
  CommandFixture f;
  const std::string pids = f.dir / "pids";
  pid_t shell = 0;
  {
    CommandCheck check(f.settings({"sh", "-c", "echo $$ > " + pids + "; exec sleep 100"}), f.loop,
                       f.launcher, f.timers);
    bool answered = false;
    check.run([&](HealthFinding) { answered = true; });
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (testing::slurp(pids).find('\n') == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      f.loop.run_for(5ms);  // the file appears without any handler running: poll
    }
    std::istringstream(testing::slurp(pids)) >> shell;
    CHECK_FALSE(answered);
  }
  REQUIRE(shell > 0);
  CHECK_FALSE(proc_exists(shell));
}

TEST_CASE("health setup: the configured checks, run once on fake inputs", "[integration]") {
  CommandFixture f;
  FakeClock clock;
  testing::spit(f.dir / "meminfo", "MemTotal: 1000 kB\nMemAvailable: 500 kB\n");
  testing::spit(f.dir / "kern.log", "");
  HealthSettings s;
  s.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  s.kernel_log = f.dir / "kern.log";
  s.checkpoint_dir = f.dir / "ckpt";
  s.disk_warning_bytes = s.disk_fatal_bytes = 0;
  s.meminfo_path = f.dir / "meminfo";
  s.memory_psi_path = f.dir / "no-psi";
  CommandCheckSettings cmd;
  cmd.name = "ok";
  cmd.argv = {"true"};
  s.commands.push_back(cmd);
  auto monitor = make_health_monitor(s, f.deps(clock));
  bool unhealthy = false;
  monitor->start([&](auto) { unhealthy = true; });
  clock.advance(0s);
  REQUIRE(f.loop.run_until([&] { return monitor->status().back().counters.attempts == 1; }, 10s));
  std::vector<std::string> names;
  for (const CheckStatus& st : monitor->status()) {
    names.push_back(st.name);
    CAPTURE(st.name, st.last.evidence);
    CHECK(st.counters.attempts == 1);
    CHECK(st.available == (st.name != "gpu"));
    CHECK(st.healthy);
  }
  CHECK(names == std::vector<std::string>{"gpu", "xid", "disk", "memory", "command:ok"});
  CHECK_FALSE(unhealthy);
  CHECK(dynamic_cast<DiskCheck*>(monitor->find("disk")) != nullptr);
  HealthSettings off;
  off.enabled = false;
  CHECK(make_health_monitor(off, f.deps(clock))->status().empty());
}
