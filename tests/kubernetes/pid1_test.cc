// `shardguard run` as a pod runs it (examples/kubernetes/Containerfile): the ENTRYPOINT is
// PID 1 of the container's own PID namespace, and the kubelet sends SIGTERM to PID 1 only,
// never to the ranks. Played here with `unshare --pid --fork --mount-proc` (no container
// engine on this machine): the real binary, the real example trainer, real signals.
// Skips (exit 77) where no PID namespace can be made (not root, no user namespaces).
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/run/run_fixture.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

const std::vector<std::string> kTrain = {
    "--steps", "300",        "--rows", "64", "--log-every", "0", "--checkpoint-every",
    "1000",    "--sleep-ms", "5"};

// util-linux's unshare, by full path (Background spawns without a PATH search).
std::string unshare_bin() {
  static const std::string path = [] {
    std::string out = run_command("command -v unshare").out;
    return out.substr(0, out.find('\n'));
  }();
  return path;
}

void skip_without_pid_namespace() {
  static const bool ok =
      !unshare_bin().empty() &&
      run_command(unshare_bin() + " --pid --fork --mount-proc true").exit_code == 0;
  if (!ok) {
    std::printf("SKIPPED: `unshare --pid --fork --mount-proc` is not permitted here: no PID 1\n");
    std::fflush(stdout);
    std::exit(77);
  }
}

// A pod's entrypoint: `shardguard run` as PID 1 of a new PID (and mount, for /proc) namespace.
std::vector<std::string> pod_argv(const RunDirs& d, const std::vector<std::string>& command) {
  std::vector<std::string> argv = {unshare_bin(),  "--pid",          "--fork", "--mount-proc",
                                   "--kill-child", shardguard_bin(), "run",    "--config",
                                   d.config(),     "--nproc",        "2",      "--"};
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

std::vector<std::string> trainer_command() {
  std::vector<std::string> c = {trainer_bin()};
  c.insert(c.end(), kTrain.begin(), kTrain.end());
  return c;
}

void write_pod_config(const RunDirs& d) {
  std::ofstream(d.config()) << "[job]\ncheckpoint_dir = \"" << d.ckpt() << "\"\nrun_dir = \""
                            << d.run() << "\"\n[restart]\nbackoff_initial = \"10ms\"\n"
                            << "[stop]\ngrace = \"20s\"\nterm_grace = \"2s\"\n"
                            << "[checkpoint]\nevery_steps = 1000\n";
}

// Field `key` of /proc/PID/status ("" when the process is gone).
std::string status_field(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + ":", 0) == 0) return line.substr(key.size() + 1);
  return "";
}

// Processes whose parent is `parent`, with their state letter (R, S, Z, ...).
std::vector<std::pair<pid_t, char>> children_of(pid_t parent) {
  std::vector<std::pair<pid_t, char>> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    std::istringstream ppid(status_field(pid, "PPid"));
    pid_t p = -1;
    if (ppid >> p && p == parent) {
      std::string state = status_field(pid, "State");
      out.emplace_back(pid, state.find_first_not_of(" \t") == std::string::npos
                                ? '?'
                                : state[state.find_first_not_of(" \t")]);
    }
  }
  return out;
}

// The host pid of the `shardguard run` that `unshare` forked.
pid_t shardguard_pid(const Background& pod) {
  pid_t sg = -1;
  eventually(
      [&] {
        auto kids = children_of(pod.pid());
        if (!kids.empty()) sg = kids.front().first;
        return sg > 0;
      },
      10s);
  return sg;
}

}  // namespace

TEST_CASE(
    "PID 1 of the pod: the kubelet's SIGTERM to PID 1 alone checkpoints every rank, "
    "exit 75, and the replacement pod resumes bit-identical",
    "[kubernetes][pid1][integration]") {
  skip_without_pid_namespace();
  RunDirs d;
  write_pod_config(d);
  {
    Background pod(pod_argv(d, trainer_command()), d.log());
    const pid_t sg = shardguard_pid(pod);
    REQUIRE(sg > 0);
    // NSpid: the host pid, then the pid inside the pod's namespace.
    CHECK_THAT(status_field(sg, "NSpid"), Catch::EndsWith("\t1"));
    REQUIRE(eventually([&] { return events_named(d, "hello").size() == 2; }, 20s));
    std::this_thread::sleep_for(300ms);
    REQUIRE(::kill(sg, SIGTERM) == 0);  // PID 1 only, as the kubelet does
    auto code = pod.wait(30s);
    INFO(slurp(d.log()));
    REQUIRE(code == 75);  // podFailurePolicy: Ignore, a replacement pod is created
  }
  auto committed = events_named(d, "checkpoint_committed");
  REQUIRE(committed.size() == 1);
  CHECK_THAT(run_command(shardguard_bin() + " ckpt ls " + d.ckpt()).out,
             Catch::Contains("emergency"));

  // The replacement pod (same checkpoint volume, a fresh PID namespace) resumes and finishes.
  Background again(pod_argv(d, trainer_command()), d.log());
  REQUIRE(again.wait(60s) == 0);
  auto launches = events_named(d, "launch");
  REQUIRE(launches.size() == 2);
  CHECK(field(launches[1], "resume_step") == field(committed[0], "step"));
  std::vector<std::string> reference = kTrain;
  CHECK(final_hash(d.ckpt()) == reference_hash(reference));
}

// As PID 1 (or subreaper) shardguard reaps, every second, the orphans that a rank's
// descendants leave behind (a process that left the ranks' process groups by setsid), not
// only the trees it tears down: no zombie accumulates while the job runs.
TEST_CASE(
    "PID 1 of the pod: an orphan that left the ranks' process groups is reaped while "
    "the job runs",
    "[kubernetes][pid1][integration]") {
  skip_without_pid_namespace();
  RunDirs d;
  write_pod_config(d);
  std::vector<std::string> command = {"/bin/sh", "-c", "(setsid sleep 0.2 &); exec \"$0\" \"$@\""};
  auto train = trainer_command();
  command.insert(command.end(), train.begin(), train.end());
  Background pod(pod_argv(d, command), d.log());
  const pid_t sg = shardguard_pid(pod);
  REQUIRE(sg > 0);
  REQUIRE(eventually([&] { return events_named(d, "hello").size() == 2; }, 20s));
  std::this_thread::sleep_for(1s);  // the orphans exited 0.2 s after their start
  size_t zombies = 0;
  for (const auto& [pid, state] : children_of(sg)) zombies += state == 'Z';
  ::kill(sg, SIGTERM);
  pod.wait(30s);
  CHECK(zombies == 0);
}
