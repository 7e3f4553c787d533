// kill -9 a trainer at random moments, restart it until it finishes, and compare its final
// checkpoint with an uninterrupted run's: tensors, rank state and global state must be
// bit-identical. Trainers: the C one on the C ABI (sg_c_trainer), the Python one on the
// package (py_trainer.py), and the example C++ trainer (sg_trainer) on hooks::Client.
// SHARDGUARD_TEST_SEED repeats a run; SHARDGUARD_KILL_COUNT sets the kills per trainer.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/paths.h"
#include "checkpoint/reader.h"
#include "tests/support/same_checkpoint.h"
#include "tests/support/temp_dir.h"

extern char** environ;

using namespace std::chrono_literals;
using namespace shardguard;
using shardguard::testing::TempDir;
using shardguard::testing::require_same_checkpoint;

namespace {

int kill_count() {
  const char* n = std::getenv("SHARDGUARD_KILL_COUNT");
  return n != nullptr ? std::atoi(n) : 4;
}

uint32_t seed() {
  const char* s = std::getenv("SHARDGUARD_TEST_SEED");
  return s != nullptr ? static_cast<uint32_t>(std::strtoul(s, nullptr, 10))
                      : std::random_device{}();
}

// The environment of a trainer run outside shardguard: ours without SHARDGUARD_* (except
// the library path) and with the Python path set.
std::vector<std::string> trainer_env() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (entry.rfind("SHARDGUARD_", 0) == 0 || entry.rfind("PYTHONPATH=", 0) == 0) continue;
    env.push_back(entry);
  }
  env.push_back("PYTHONPATH=" SG_PYTHONPATH);
  env.push_back("SHARDGUARD_LIB=" SG_LIB);
  return env;
}

pid_t spawn(const std::vector<std::string>& argv) {
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  static const std::vector<std::string> env = trainer_env();
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

// Runs to completion, killed `kills` times first, each at a random moment in `window` after
// its start. Returns how many kills landed while it ran.
int run(const std::vector<std::string>& argv, int kills, Window window, std::mt19937& rng) {
  int landed = 0;
  for (int i = 0; i < kills; ++i) {
    const pid_t pid = spawn(argv);
    const auto span = (window.second - window.first).count();
    std::this_thread::sleep_for(window.first + std::chrono::milliseconds(rng() % span));
    ::kill(pid, SIGKILL);
    const int code = wait_exit(pid);
    if (code == 128 + SIGKILL) {
      ++landed;
      continue;
    }
    REQUIRE(code == 0);  // it finished before the kill: nothing left to interrupt
    return landed;
  }
  REQUIRE(wait_exit(spawn(argv)) == 0);
  return landed;
}

// Everything a resume depends on must be equal; only the creation time may differ.
void require_identical(const std::string& expected_dir, const std::string& actual_dir,
                       uint64_t step) {
  auto& fs = PosixFilesystem::instance();
  const std::string name = checkpoint::step_dir_name(step);
  auto a = checkpoint::CheckpointReader::open(fs, join_path(expected_dir, name));
  auto b = checkpoint::CheckpointReader::open(fs, join_path(actual_dir, name));
  if (!a.ok()) FAIL(a.error().message());
  if (!b.ok()) FAIL(b.error().message());
  require_same_checkpoint(*a, *b);
}

void kill_and_compare(const std::function<std::vector<std::string>(const std::string&)>& argv_for,
                      uint64_t steps, Window window) {
  const uint32_t s = seed();
  INFO("SHARDGUARD_TEST_SEED=" << s);
  std::mt19937 rng(s);
  TempDir clean, interrupted;
  REQUIRE(wait_exit(spawn(argv_for(clean.path()))) == 0);
  const int landed = run(argv_for(interrupted.path()), kill_count(), window, rng);
  WARN(landed << " of " << kill_count() << " kills landed mid-run (seed " << s << ")");
  require_identical(clean.path(), interrupted.path(), steps);
}

bool python_has_numpy() {
  const std::string cmd = std::string(SG_PYTHON) + " -c 'import numpy' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

}  // namespace

TEST_CASE("kill -9 and resume: the C trainer ends bit-identical", "[integration]") {
  kill_and_compare(
      [](const std::string& dir) {
        return std::vector<std::string>{SG_C_TRAINER, dir, "300", "2000", "7"};
      },
      300, {20ms, 900ms});
}

TEST_CASE("kill -9 and resume: the Python trainer ends bit-identical", "[integration]") {
  if (!python_has_numpy()) {
    WARN("SKIP: " SG_PYTHON " has no numpy");
    return;
  }
  kill_and_compare(
      [](const std::string& dir) {
        return std::vector<std::string>{SG_PYTHON, SG_PY_TRAINER, dir, "300", "8", "10"};
      },
      300, {1300ms, 2500ms});  // after the imports (torch takes about a second)
}

TEST_CASE("kill -9 and resume: the example C++ trainer ends bit-identical", "[integration]") {
  const std::string trainer = SG_CXX_TRAINER;
  if (trainer.empty()) {
    WARN("SKIP: sg_trainer was not built");
    return;
  }
  kill_and_compare(
      [trainer](const std::string& dir) {
        return std::vector<std::string>{trainer, "--checkpoint-dir", dir, "--steps",
                                        "300",   "--sleep-ms",       "2", "--checkpoint-every",
                                        "20",    "--log-every",      "0"};
      },
      300, {20ms, 900ms});
}
