// The example trainers (C++ sg_trainer, numpy_trainer.py, torch_trainer.py) under `shardguard
// run`, disrupted at random moments by a seeded random sequence of events:
//   kill   kill -9 of a random rank: shardguard tears the attempt down and relaunches it;
//   term   SIGTERM to shardguard: emergency checkpoint, exit 75, then a new `shardguard run`
//          (a new machine) with a random --nproc resumes;
//   drain  `shardguard drain`: the same through the run's agent socket;
//   split  a second `shardguard run` on the same checkpoint directory while the first runs
//          (split brain): it must exit 78 at once, naming the lease, and change nothing;
//   flip   before a new `shardguard run` (after a 75), one byte of the newest checkpoint's
//          largest shard is flipped: the resume detects it (block checksums), sets the step
//          aside and falls back to the one before.
// Then the run is left to finish, and `shardguard ckpt inspect --hash` of the final
// checkpoint must equal that of the same training run without interruptions (one rank, no
// supervisor). SHARDGUARD_TEST_SEED repeats a sequence; SHARDGUARD_DISRUPTIONS sets how many
// events each trainer gets (default 3; the `slow` registration runs 30, 10 when bounded).
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>

#include "tests/run/run_fixture.h"

#ifndef SG_LIB  // no libshardguard.so in this build: the Python cases skip
#define SG_LIB ""
#endif

using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

// scripts/test runs the `slow` tests in a bounded form (SHARDGUARD_SLOW_BOUNDED=1): 10 here.
int disruption_count() {
  const char* n = std::getenv("SHARDGUARD_DISRUPTIONS");
  const int count = n != nullptr ? std::atoi(n) : 3;
  const char* bounded = std::getenv("SHARDGUARD_SLOW_BOUNDED");
  return bounded != nullptr && std::string(bounded) == "1" ? std::min(count, 10) : count;
}

uint32_t test_seed() {
  const char* s = std::getenv("SHARDGUARD_TEST_SEED");
  return s != nullptr ? static_cast<uint32_t>(std::strtoul(s, nullptr, 10))
                      : std::random_device{}();
}

// A free port for torch_trainer.py's process group, so that tests running at once differ
// (drawn apart from the seeded sequence, which must not depend on what is free).
int free_port() {
  std::mt19937 rng(std::random_device{}());
  for (int tries = 0; tries < 100; ++tries) {
    const int port = 20000 + static_cast<int>(rng() % 12000);  // below the ephemeral range
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (ok) return port;
  }
  return 29500;
}

struct Trainer {
  std::string name;
  std::vector<std::string> command;             // the rank command before the flags
  std::vector<std::string> args;                // training flags (no --steps, --checkpoint-dir)
  // --steps: enough that most disruptions land before the end.
  uint64_t base_steps = 300, steps_per_disruption = 150;
  std::map<std::string, std::string> env;       // [job.env]
  std::vector<uint32_t> nprocs = {1, 2, 3};     // a new machine's --nproc, at random
  uint32_t first_nproc = 2;
  std::chrono::milliseconds window{1000};       // random delays are within this
};

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

void write_job(const RunDirs& d, const Trainer& t, int master_port) {
  std::ofstream f(d.config());
  f << "[job]\ncheckpoint_dir = " << toml_string(d.ckpt()) << "\nrun_dir = "
    << toml_string(d.run()) << "\nmaster_addr = \"127.0.0.1\"\nmaster_port = " << master_port
    << "\n";
  if (!t.env.empty()) {
    f << "[job.env]\n";
    for (const auto& [k, v] : t.env) f << k << " = " << toml_string(v) << "\n";
  }
  f << "[checkpoint]\nevery_steps = 50\nkeep_last = 2\n"
    << "[restart]\nbackoff_initial = \"10ms\"\nbackoff_max = \"50ms\"\nno_progress_limit = 0\n"
    << "[restart.crash]\nmax_restarts = 1000\nwindow = \"1h\"\n"
    << "[stop]\ngrace = \"30s\"\nterm_grace = \"2s\"\n";
}

std::vector<std::string> argv_for(const RunDirs& d, const Trainer& t, uint32_t nproc) {
  std::vector<std::string> argv = {shardguard_bin(), "run", "--config", d.config(), "--nproc",
                                   std::to_string(nproc), "--"};
  argv.insert(argv.end(), t.command.begin(), t.command.end());
  argv.insert(argv.end(), t.args.begin(), t.args.end());
  return argv;
}

// The final hash of the same run with one rank and no supervisor (and no --sleep-ms, which
// changes nothing but the time).
std::string reference_of(const Trainer& t, const TempDir& tmp) {
  std::string cmd = "env";
  for (const char* v : {"SHARDGUARD_JOB_ID", "SHARDGUARD_RANK", "SHARDGUARD_WORLD_SIZE",
                        "SHARDGUARD_CHECKPOINT_DIR", "SHARDGUARD_RESUME_MANIFEST",
                        "SHARDGUARD_CONTROL_SOCKET", "RANK", "WORLD_SIZE", "MASTER_ADDR"})
    cmd += std::string(" -u ") + v;
  for (const auto& [k, v] : t.env) cmd += " '" + k + "=" + v + "'";
  for (const auto& a : t.command) cmd += " '" + a + "'";
  for (size_t i = 0; i < t.args.size(); ++i) {
    if (t.args[i] == "--sleep-ms" && i + 1 < t.args.size()) {
      ++i;
      continue;
    }
    cmd += " '" + t.args[i] + "'";
  }
  cmd += " --checkpoint-dir " + tmp.path() + "/reference";
  auto r = run_command(cmd);
  if (r.exit_code != 0)
    return "reference run failed (" + std::to_string(r.exit_code) + "): " + r.err;
  return final_hash(tmp.path() + "/reference");
}

int64_t current_attempt(const RunDirs& d) {
  auto launches = events_named(d, "launch");
  return launches.empty() ? -1 : std::stoll(field(launches.back(), "attempt"));
}

pid_t hello_pid(const RunDirs& d, int64_t attempt, uint32_t rank) {
  pid_t pid = 0;
  for (const auto& e : events_named(d, "hello"))
    if (field(e, "attempt") == std::to_string(attempt) && field(e, "rank") == std::to_string(rank))
      pid = std::stoi(field(e, "pid"));
  return pid;
}

struct Tally {
  int planned = 0, kills = 0, terms = 0, drains = 0, splits = 0, flips = 0, missed = 0, runs = 1;
  std::string text() const {
    std::ostringstream s;
    s << "of " << planned << " planned: " << kills << " kill(s), " << terms << " SIGTERM(s), "
      << drains << " drain(s), " << splits << " second supervisor(s) landed, " << flips
      << " flipped byte(s), " << missed << " missed (the run had finished), " << runs
      << " `shardguard run`(s)";
    return s.str();
  }
};

// Flips one byte in the middle of the largest shard of the newest committed step; returns
// the file, or "" when there is none.
std::string flip_newest(const RunDirs& d) {
  namespace fs = std::filesystem;
  fs::path newest;
  for (const auto& e : fs::directory_iterator(d.ckpt())) {
    const std::string name = e.path().filename();
    if (name.rfind("step-", 0) != 0 || !fs::exists(e.path() / "manifest.json")) continue;
    if (newest.empty() || name > newest.filename().string()) newest = e.path();
  }
  if (newest.empty()) return "";
  fs::path largest;
  for (const auto& f : fs::directory_iterator(newest))
    if (f.path().extension() == ".safetensors" &&
        (largest.empty() || f.file_size() > fs::file_size(largest)))
      largest = f.path();
  if (largest.empty()) return "";
  std::fstream file(largest, std::ios::in | std::ios::out | std::ios::binary);
  const auto at = static_cast<std::streamoff>(fs::file_size(largest) / 2);
  char c = 0;
  file.seekg(at);
  file.read(&c, 1);
  c = static_cast<char>(c ^ 0xff);
  file.seekp(at);
  file.write(&c, 1);
  return largest.string();
}

void disrupt_and_compare(Trainer t) {
  const uint32_t seed = test_seed();
  std::mt19937 rng(seed);
  const int count = disruption_count();
  t.args.push_back("--steps");
  t.args.push_back(std::to_string(t.base_steps + t.steps_per_disruption * uint64_t(count)));
  RunDirs d;
  write_job(d, t, free_port());
  INFO("trainer " << t.name << ", SHARDGUARD_TEST_SEED=" << seed << ", run dir " << d.tmp.path());
  WARN(t.name << ": " << count << " disruption(s), SHARDGUARD_TEST_SEED=" << seed);
  auto log = [&] { return slurp(d.log()); };

  uint32_t nproc = t.first_nproc;
  auto run = std::make_unique<Background>(argv_for(d, t, nproc), d.log());
  std::optional<int> finished;  // the exit code of `run` once it ended
  auto poll = [&] {
    if (!finished) finished = run->wait(1ms);
    return finished.has_value();
  };
  Tally tally;
  tally.planned = count;
  std::string sequence;
  int64_t disrupted = -1;  // the newest attempt already disrupted (or of an earlier run)
  // A new `shardguard run` on another machine after a run exited 75.
  auto relaunch = [&] {
    disrupted = std::max(disrupted, current_attempt(d));
    nproc = t.nprocs[rng() % t.nprocs.size()];
    if (rng() % 2 == 0 && !flip_newest(d).empty()) {
      sequence += " flip";
      ++tally.flips;
    }
    sequence += " -> nproc " + std::to_string(nproc);
    run = std::make_unique<Background>(argv_for(d, t, nproc), d.log());
    finished.reset();
    ++tally.runs;
  };

  for (int i = 0; i < count && !(poll() && *finished == 0); ++i) {
    // 0, 1: kill; 2: SIGTERM; 3: drain; 4: a second supervisor
    const int kind = static_cast<int>(rng() % 5);
    const auto delay = std::chrono::milliseconds(rng() % t.window.count());
    const uint32_t victim = static_cast<uint32_t>(rng() % nproc);
    // Wait for a new attempt of this run (and, for a kill, the victim's hello), then for
    // the random delay: a SIGTERM or drain may land while the ranks still start.
    int64_t attempt = -1;
    pid_t pid = 0;
    REQUIRE(eventually([&] {
      if (poll()) return true;
      attempt = current_attempt(d);
      if (attempt <= disrupted) return false;
      return kind > 1 || (pid = hello_pid(d, attempt, victim)) > 0;
    }, 120s));
    std::this_thread::sleep_for(delay);
    if (poll()) {
      INFO(sequence << "\n" << log());
      REQUIRE(*finished == 0);
      ++tally.missed;
      break;
    }
    disrupted = attempt;
    if (kind <= 1) {
      sequence += " kill(rank " + std::to_string(victim) + ", +" + std::to_string(delay.count()) +
                  "ms)";
      if (::kill(pid, SIGKILL) != 0) {  // it was gone already (its attempt ended)
        ++tally.missed;
        continue;
      }
      ++tally.kills;
      continue;  // shardguard relaunches by itself
    }
    if (kind == 4) {
      sequence += " split(+" + std::to_string(delay.count()) + "ms)";
      Background second(argv_for(d, t, nproc), d.log());
      const auto code = second.wait(60s);
      INFO(sequence << "\n" << log());
      if (poll()) {  // the first one finished meanwhile: the second may have taken over
        ++tally.missed;
        if (code == 0) break;
        continue;
      }
      REQUIRE(code == 78);  // the lease is held: requeueing will not help
      ++tally.splits;
      continue;  // the first run goes on undisturbed
    }
    if (kind == 2) {
      sequence += " SIGTERM(+" + std::to_string(delay.count()) + "ms)";
      run->signal(SIGTERM);
    } else {
      sequence += " drain(+" + std::to_string(delay.count()) + "ms)";
      auto r = run_command(shardguard_bin() + " drain --run-dir " + d.run() + " --deadline 30s");
      INFO(r.err);
      // A run that has just finished refuses the notice (its agent socket still answers while
      // the last teardown goes out) or no longer listens: the only acceptable refusals.
      REQUIRE((r.exit_code == 0 || r.err.find("no run listens") != std::string::npos ||
               r.err.find("the run has finished") != std::string::npos));
    }
    finished = run->wait(90s);
    INFO(sequence << "\n" << log());
    REQUIRE(finished.has_value());
    REQUIRE((*finished == 75 || *finished == 0));  // 0: it had just finished
    (kind == 2 ? tally.terms : tally.drains)++;
    if (*finished == 75) relaunch();
  }
  // No more disruptions: let it finish (a run that still ends in 75 is relaunched).
  for (int more = 0; more < 3; ++more) {
    if (!finished) finished = run->wait(180s);
    INFO(sequence << "\n" << log());
    REQUIRE(finished.has_value());
    if (*finished != 75) break;
    relaunch();
  }
  INFO(sequence << "\n" << log());
  REQUIRE(*finished == 0);
  WARN(t.name << ": " << tally.text() << "\n  nproc " << t.first_nproc << sequence);

  const std::string got = final_hash(d.ckpt());
  TempDir ref;
  const std::string want = reference_of(t, ref);
  INFO(sequence << "\n" << log());
  REQUIRE_FALSE(got.empty());
  CHECK(got == want);
}

bool python_has(const std::string& module) {
  if (std::string(SG_LIB).empty()) return false;
  return std::system((std::string(SG_PYTHON) + " -c 'import " + module + "' >/dev/null 2>&1")
                         .c_str()) == 0;
}

std::map<std::string, std::string> python_env() {
  return {{"PYTHONPATH", SG_PYTHONPATH}, {"SHARDGUARD_LIB", SG_LIB}, {"PYTHONUNBUFFERED", "1"}};
}

}  // namespace

TEST_CASE("The C++ trainer under random kills, SIGTERMs and drains ends bit-identical",
          "[run][integration]") {
  Trainer t;
  t.name = "sg_trainer";
  t.command = {trainer_bin()};
  t.args = {"--rows", "96", "--log-every", "0", "--sleep-ms", "4", "--checkpoint-every", "50"};
  disrupt_and_compare(t);
}

TEST_CASE("The numpy trainer under random kills, SIGTERMs and drains ends bit-identical",
          "[run][integration]") {
  if (!python_has("numpy")) {
    WARN("skipped: " SG_PYTHON " has no numpy (or this build has no libshardguard.so)");
    return;
  }
  Trainer t;
  t.name = "numpy_trainer.py";
  t.command = {SG_PYTHON, SG_NUMPY_TRAINER};
  t.args = {"--rows", "96", "--samples", "1024", "--log-every", "0", "--sleep-ms", "4",
            "--checkpoint-every", "50"};
  t.env = python_env();
  disrupt_and_compare(t);
}

TEST_CASE("The torch trainer under random kills, SIGTERMs and drains ends bit-identical",
          "[run][integration]") {
  if (!python_has("torch") || !python_has("numpy")) {
    WARN("skipped: " SG_PYTHON " has no torch or numpy (or this build has no libshardguard.so)");
    return;
  }
  Trainer t;
  t.name = "torch_trainer.py";
  t.command = {SG_PYTHON, SG_TORCH_TRAINER};
  t.args = {"--rows", "96", "--samples", "1024", "--log-every", "0", "--sleep-ms", "4",
            "--checkpoint-every", "50"};
  t.base_steps = 150;
  t.steps_per_disruption = 130;
  t.env = python_env();
  t.env["OMP_NUM_THREADS"] = "1";
  t.window = 3000ms;  // importing torch takes a while
  disrupt_and_compare(t);
}
