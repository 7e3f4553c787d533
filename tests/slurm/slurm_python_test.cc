// A Python trainer written from the README's five calls (tests/slurm/readme_trainer.py: no
// PreemptionGuard, no signal handling of its own) as 2 ranks under `shardguard run` in the
// shipped script: scancel sends SIGTERM to every process of the job; the Python ranks survive
// it (the client catches it), save the step shardguard names and exit 75; the job ends
// CANCELLED. A new submission continues from that checkpoint (the directory names the job)
// and ends bit-identical to an uninterrupted run. Skips where numpy is missing.
#include <algorithm>

#include "tests/slurm/slurm_job_util.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

const char* kPython = "/usr/bin/python3";

std::string trainer_script() { return source_dir() + "/tests/slurm/readme_trainer.py"; }

// The ranks run the Python trainer instead of the example C++ one.
void use_python(SlurmRun& run, const std::vector<std::string>& args) {
  run.command = {kPython, trainer_script()};
  run.command.insert(run.command.end(), args.begin(), args.end());
  run.exports = {"PYTHONPATH=" + source_dir() + "/hooks/python",
                 std::string("SHARDGUARD_LIB=") + SG_LIB};
}

}  // namespace

TEST_CASE(
    "slurm + shardguard: a Python trainer from the README's five calls survives scancel's "
    "SIGTERM to every process with an emergency checkpoint; the next submission ends bit-identical",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  if (run_command(std::string(kPython) + " -c 'import numpy'").exit_code != 0) {
    WARN("SKIPPED: " << kPython << " has no numpy");
    return;
  }
  SlurmOptions options;
  options.nodes = 1;
  auto c = start_cluster(options);
  const std::vector<std::string> args = {"--steps", "1000", "--sleep-ms", "10"};
  SlurmRun run({});
  use_python(run, args);
  const auto id = submit_or_fail(*c, shipped_script(), run.sbatch_args());
  wait_state_or_fail(*c, id, {"RUNNING"}, 30s);
  run.wait_hellos(2, 60s);
  std::this_thread::sleep_for(1s);
  REQUIRE(c->run({"scancel", std::to_string(id)})->exit_code == 0);
  wait_state_or_fail(*c, id, {"CANCELLED"}, 30s);
  std::this_thread::sleep_for(2s);  // a wrongful requeue would show by now
  print_decisions("Python ranks, scancel", run);
  {
    INFO(run.events_text() << "\njob output:\n" << slurp(c->job_output_path(id)));
    CHECK(c->job(id)->state() == "CANCELLED");
    CHECK(c->job(id)->restarts() == 0);
    // Every rank reports the SIGTERM it got (Slurm may deliver it to a rank twice: to the
    // step and to the job's processes); only the first report makes a notice.
    const auto signals = run.named("rank_signal");
    CHECK(signals.size() >= 2);
    CHECK(std::count_if(signals.begin(), signals.end(), [](const auto& e) {
            return field(e, "notice") == "true";
          }) == 1);
    const auto exits = run.named("rank_exit");
    REQUIRE(exits.size() == 2);
    for (const auto& e : exits) CHECK(field(e, "status") == "exited with code 75");
    CHECK(field(run.named("finish").at(0), "summary").find("emergency checkpoint of step") == 0);
    CHECK_THAT(run_command(shardguard_bin() + " ckpt ls " + run.dirs.ckpt()).out,
               Catch::Contains("emergency"));
    CHECK(field(run.named("slurm_decision").at(0), "case") == "cancelled");
  }

  // A new submission: the checkpoint directory's own job id, so it continues.
  const auto again = submit_or_fail(*c, shipped_script(), run.sbatch_args());
  wait_completed(*c, again, run, 120s);
  INFO(run.events_text());
  CHECK(field(run.named("launch").back(), "resume_step") != "-1");
  TempDir ref;
  const auto r = run_command(
      "PYTHONPATH=" + source_dir() + "/hooks/python SHARDGUARD_LIB=" + SG_LIB + " " + kPython +
      " " + trainer_script() + " --steps 1000 --checkpoint-dir " + ref.path() + "/ckpt");
  REQUIRE(r.exit_code == 0);
  CHECK(final_hash(run.dirs.ckpt()) == final_hash(ref.path() + "/ckpt"));
}
