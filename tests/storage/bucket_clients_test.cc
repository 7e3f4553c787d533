// The job-side clients on a bucket (s3://BUCKET/PREFIX on a real Ceph RGW), as a user runs
// them:
//   - alone (no supervisor): the C trainer on the C ABI, the Python trainer on the package and
//     the example C++ trainer on hooks::Client save to the bucket, are SIGKILLed at random
//     moments and resume from it, and end bit-identical to the same run into a directory;
//     the Python package's Reader opens the bucket's checkpoint by its URL;
//   - under `shardguard run`: the example numpy trainer with 2 ranks, one SIGKILLed, then a
//     new run resuming on 3 (resharded from the bucket), ends bit-identical to the trainer
//     alone.
// SHARDGUARD_TEST_SEED repeats the kill moments.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/paths.h"
#include "checkpoint/reader.h"
#include "tests/run/run_fixture.h"
#include "tests/support/same_checkpoint.h"
#include "tests/storage/s3_rig.h"
#include "tests/support/temp_dir.h"

extern char** environ;

using namespace shardguard;
using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

uint32_t seed() {
  const char* s = std::getenv("SHARDGUARD_TEST_SEED");
  return s != nullptr ? static_cast<uint32_t>(std::strtoul(s, nullptr, 10))
                      : std::random_device{}();
}

bool python_has_numpy() {
  const std::string cmd = std::string(SG_PYTHON) + " -c 'import numpy' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// A trainer's environment outside shardguard: ours without SHARDGUARD_*, with the rig's keys
// and endpoint (as AWS's own variables: what a user sets), the Python path and the library.
std::vector<std::string> client_env(S3Rig& rig) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (entry.rfind("SHARDGUARD_", 0) == 0 || entry.rfind("PYTHONPATH=", 0) == 0 ||
        entry.rfind("AWS_", 0) == 0)
      continue;
    env.push_back(entry);
  }
  for (const auto& [k, v] : rig.cluster().env()) env.push_back(k + "=" + v);
  env.push_back("PYTHONPATH=" SG_PYTHONPATH);
  env.push_back("SHARDGUARD_LIB=" SG_LIB);
  return env;
}

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = -1;
  REQUIRE(::posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), envp.data()) == 0);
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

using Window = std::pair<std::chrono::milliseconds, std::chrono::milliseconds>;

// Runs to completion, SIGKILLed `kills` times first at random moments in `window`; returns
// how many kills landed while it ran.
int run_with_kills(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                   int kills, Window window, std::mt19937& rng) {
  int landed = 0;
  for (int i = 0; i < kills; ++i) {
    const pid_t pid = spawn(argv, env);
    const auto span = (window.second - window.first).count();
    std::this_thread::sleep_for(window.first + std::chrono::milliseconds(rng() % span));
    ::kill(pid, SIGKILL);
    const int code = wait_exit(pid);
    if (code == 128 + SIGKILL) {
      ++landed;
      continue;
    }
    REQUIRE(code == 0);  // it finished before the kill
    return landed;
  }
  REQUIRE(wait_exit(spawn(argv, env)) == 0);
  return landed;
}

// The final checkpoint of `step` in the directory and in the bucket: every tensor, rank state
// and the global state equal.
void require_identical(const std::string& dir, storage::Store& bucket, uint64_t step) {
  auto a = checkpoint::CheckpointReader::open(PosixFilesystem::instance(),
                                              join_path(dir, checkpoint::step_dir_name(step)));
  auto b = checkpoint::CheckpointReader::open(bucket, step);
  if (!a.ok()) FAIL(a.error().message());
  if (!b.ok()) FAIL(b.error().message());
  require_same_checkpoint(*a, *b);
}

// A clean run into a directory; the same run into the bucket, killed twice; compared.
void kill_and_compare(const std::string& name,
                      const std::function<std::vector<std::string>(const std::string&)>& argv_for,
                      uint64_t steps, Window window) {
  S3Rig& rig = *S3Rig::shared();
  const std::string bucket = rig.new_bucket("clients");
  const std::string url = "s3://" + bucket + "/" + name;
  const auto env = client_env(rig);
  const uint32_t s = seed();
  INFO(name << ", SHARDGUARD_TEST_SEED=" << s);
  std::mt19937 rng(s);
  TempDir clean;
  REQUIRE(wait_exit(spawn(argv_for(clean.path()), env)) == 0);
  const int landed = run_with_kills(argv_for(url), env, 2, window, rng);
  WARN(name << " on " << url << ": " << landed << " of 2 kills landed mid-run (seed " << s << ")");
  auto store = rig.store(bucket, name);
  require_identical(clean.path(), *store, steps);
}

}  // namespace

TEST_CASE("the C trainer alone saves to and resumes from a bucket, bit-identical",
          "[integration]") {
  SG_REQUIRE_RGW();
  kill_and_compare(
      "c", [](const std::string& loc) { return std::vector<std::string>{SG_C_TRAINER, loc, "300",
                                                                         "2000", "7"}; },
      300, {100ms, 900ms});
}

TEST_CASE("the Python trainer alone saves to and resumes from a bucket, bit-identical",
          "[integration]") {
  SG_REQUIRE_RGW();
  if (!python_has_numpy()) {
    WARN("SKIP: " SG_PYTHON " has no numpy");
    return;
  }
  kill_and_compare(
      "py",
      [](const std::string& loc) {
        return std::vector<std::string>{SG_PYTHON, SG_PY_TRAINER, loc, "300", "8", "10"};
      },
      300, {1300ms, 2500ms});

  // The package's Reader opens a bucket's checkpoint by its URL and reads a tensor whole.
  S3Rig& rig = *S3Rig::shared();
  const std::string bucket = rig.new_bucket("pyread");
  const std::string url = "s3://" + bucket + "/py";
  REQUIRE(wait_exit(spawn({SG_PYTHON, SG_PY_TRAINER, url, "40", "0", "20"}, client_env(rig))) ==
          0);
  TempDir out;
  const std::string script = out / "read.py";
  std::ofstream(script) << "import sys, shardguard\n"
                        << "r = shardguard.Reader.open(sys.argv[1])\n"
                        << "names = r.names()\n"
                        << "print(r.step, len(names), sum(r.read(n).nbytes for n in names))\n";
  const std::string log = out / "read.log";
  auto env = client_env(rig);
  std::vector<std::string> argv = {"/bin/sh", "-c",
                                   std::string(SG_PYTHON) + " " + script + " " + url +
                                       "/step-000000040 > " + log + " 2>&1"};
  const int code = wait_exit(spawn(argv, env));
  INFO(slurp(log));
  REQUIRE(code == 0);
  auto store = rig.store(bucket, "py");
  auto reader = checkpoint::CheckpointReader::open(*store, 40);
  REQUIRE(reader.ok());
  uint64_t bytes = 0;
  for (const auto& n : reader->tensor_names()) bytes += reader->read_whole(n)->size();
  CHECK(slurp(log) == "40 " + std::to_string(reader->tensor_names().size()) + " " +
                          std::to_string(bytes) + "\n");
}

TEST_CASE("the example C++ trainer alone saves to and resumes from a bucket, bit-identical",
          "[integration]") {
  SG_REQUIRE_RGW();
  kill_and_compare(
      "cxx",
      [](const std::string& loc) {
        return std::vector<std::string>{trainer_bin(), "--checkpoint-dir", loc, "--steps", "300",
                                        "--sleep-ms", "2", "--checkpoint-every", "20",
                                        "--log-every", "0"};
      },
      300, {100ms, 900ms});
}

TEST_CASE(
    "the numpy trainer under shardguard run on a bucket: a rank SIGKILLed, resumed on 3 ranks, "
    "ends bit-identical",
    "[integration]") {
  SG_REQUIRE_RGW();
  if (!python_has_numpy()) {
    WARN("SKIP: " SG_PYTHON " has no numpy");
    return;
  }
  S3Rig& rig = *S3Rig::shared();
  for (const auto& [k, v] : rig.cluster().env()) ::setenv(k.c_str(), v.c_str(), 1);
  const std::string bucket = rig.new_bucket("numpy");
  const std::string url = "s3://" + bucket + "/job";
  const std::vector<std::string> train = {"--steps",     "400", "--rows",      "96",
                                          "--samples",   "1024", "--log-every", "0",
                                          "--sleep-ms",  "5",    "--checkpoint-every", "50"};
  // The trainer alone, into a directory: the reference.
  TempDir ref;
  std::string alone = "PYTHONPATH=" SG_PYTHONPATH " SHARDGUARD_LIB=" SG_LIB " " SG_PYTHON
                      " " SG_NUMPY_TRAINER " --checkpoint-dir " + ref.path();
  for (const auto& a : train) alone += " " + a;
  auto reference = run_command(alone);
  INFO(reference.out << reference.err);
  REQUIRE(reference.exit_code == 0);
  const std::string want = final_hash(ref.path());

  RunDirs d;
  std::ofstream(d.config()) << "[job]\ncheckpoint_dir = \"" << url << "\"\n"
                            << "run_dir = \"" << d.run() << "\"\n"
                            << "[job.env]\nPYTHONPATH = \"" SG_PYTHONPATH "\"\n"
                            << "SHARDGUARD_LIB = \"" SG_LIB "\"\nPYTHONUNBUFFERED = \"1\"\n"
                            << "[restart]\nbackoff_initial = \"10ms\"\nbackoff_max = \"50ms\"\n"
                            << "[stop]\nterm_grace = \"2s\"\n"
                            << "[checkpoint]\nevery_steps = 50\n";
  auto argv_for = [&](uint32_t nproc) {
    std::vector<std::string> argv = {shardguard_bin(), "run",  "--config", d.config(), "--nproc",
                                     std::to_string(nproc), "--", SG_PYTHON, SG_NUMPY_TRAINER};
    argv.insert(argv.end(), train.begin(), train.end());
    return argv;
  };
  {
    // 2 ranks; rank 1 SIGKILLed once a checkpoint is committed; then SIGTERM: an emergency
    // save in the bucket and exit 75 (the VM goes).
    Background run(argv_for(2), d.log());
    pid_t victim = 0;
    for (int i = 0; i < 1200 && victim == 0; ++i) {
      std::this_thread::sleep_for(50ms);
      if (events_named(d, "checkpoint_committed").empty()) continue;
      for (const auto& e : events_named(d, "hello"))
        if (field(e, "attempt") == "0" && field(e, "rank") == "1")
          victim = static_cast<pid_t>(std::stol(field(e, "pid")));
    }
    INFO(slurp(d.log()));
    REQUIRE(victim > 0);
    ::kill(victim, SIGKILL);
    bool relaunched = false;
    for (int i = 0; i < 600 && !relaunched; ++i) {
      std::this_thread::sleep_for(50ms);
      relaunched = events_named(d, "launch").size() >= 2;
    }
    REQUIRE(relaunched);
    run.signal(SIGTERM);
    REQUIRE(run.wait(90s) == std::optional<int>(75));
  }
  auto ls = run_command(shardguard_bin() + " ckpt ls " + url);
  INFO(ls.out << ls.err);
  CHECK_THAT(ls.out, Catch::Contains("emergency"));
  // A new machine with 3 ranks resumes from the bucket and finishes.
  Background again(argv_for(3), d.log());
  const auto code = again.wait(180s);
  INFO(slurp(d.log()));
  REQUIRE(code == 0);
  auto launches = events_named(d, "launch");
  REQUIRE_FALSE(launches.empty());
  CHECK(field(launches.back(), "nproc") == "3");
  CHECK(final_hash(url) == want);
}
