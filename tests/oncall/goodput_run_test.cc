// Issue 14's check: the goodput figures that `shardguard status` and `shardguard report` print
// for a real interrupted run dir agree within 1 % with an independent script
// (tests/oncall/goodput_check.py) that recomputes them from events.jsonl. The run dir holds
// two `shardguard run`s of the example trainer: the first has a rank killed with SIGKILL
// (relaunched from its last commit) and is then stopped by SIGTERM (emergency checkpoint,
// exit 75); the second resumes on 3 ranks and finishes.
#include <catch2/catch.hpp>
#include <regex>

#include "tests/run/run_fixture.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

const std::vector<std::string> kTrain = {
    "--steps", "600",        "--rows", "64", "--log-every", "0", "--checkpoint-every",
    "50",      "--sleep-ms", "5"};

void write_job(const RunDirs& d) {
  std::ofstream(d.config()) << "[job]\ncheckpoint_dir = \"" << d.ckpt() << "\"\nrun_dir = \""
                            << d.run() << "\"\n[restart]\nbackoff_initial = \"10ms\"\n"
                            << "backoff_max = \"50ms\"\n[stop]\ngrace = \"20s\"\n"
                            << "term_grace = \"2s\"\n[checkpoint]\nevery_steps = 50\n";
}

std::string attempt_of(const shardguard::supervisor::EventRecord& e) { return field(e, "attempt"); }

// Committed checkpoints of attempt `attempt`.
size_t commits_of(const RunDirs& d, const std::string& attempt) {
  size_t n = 0;
  for (const auto& e : events_named(d, "checkpoint_committed")) n += attempt_of(e) == attempt;
  return n;
}

std::string check_script(const RunDirs& d, const std::string& status_json,
                         const std::string& report) {
  return std::string(SG_PYTHON) + " " + SG_GOODPUT_CHECK + " " + d.run() + "/events.jsonl" +
         (status_json.empty() ? "" : " --status-json " + status_json) +
         (report.empty() ? "" : " --report " + report);
}

// A copy of `path` with the first "ratio": value scaled by `factor`.
std::string doctored(const RunDirs& d, const std::string& path, double factor) {
  std::string text = slurp(path);
  std::smatch m;
  std::regex ratio("\"ratio\":([0-9.]+)");
  REQUIRE(std::regex_search(text, m, ratio));
  const double v = std::stod(m[1].str()) * factor;
  text = m.prefix().str() + "\"ratio\":" + std::to_string(v) + m.suffix().str();
  const std::string out = d.tmp / "doctored.json";
  spit(out, text);
  return out;
}

}  // namespace

TEST_CASE(
    "Goodput of a killed, SIGTERMed and resumed run: status and report agree with an "
    "independent recomputation",
    "[oncall][integration]") {
  RunDirs d;
  write_job(d);
  {
    Background run(run_argv(d, 2, kTrain), d.log());
    REQUIRE(eventually([&] { return commits_of(d, "0") >= 1; }, 30s));
    pid_t victim = 0;
    for (const auto& e : events_named(d, "hello"))
      if (attempt_of(e) == "0" && field(e, "rank") == "1") victim = std::stoi(field(e, "pid"));
    REQUIRE(victim > 0);
    // Some 20 steps past the commit of step 50 (5 ms each), so that steps are lost.
    std::this_thread::sleep_for(120ms);
    REQUIRE(::kill(victim, SIGKILL) == 0);
    // The relaunch trains and commits before the SIGTERM stops it.
    REQUIRE(eventually([&] { return commits_of(d, "1") >= 1; }, 30s));
    run.signal(SIGTERM);
    auto code = run.wait(40s);
    INFO(slurp(d.log()));
    REQUIRE(code == 75);
  }
  {
    Background again(run_argv(d, 3, kTrain), d.log());
    auto code = again.wait(60s);
    INFO(slurp(d.log()));
    REQUIRE(code == 0);
  }
  REQUIRE(events_named(d, "start").size() == 2);
  REQUIRE(events_named(d, "launch").size() == 3);

  const std::string status_json = d.tmp / "status.json", report = d.tmp / "report.md";
  auto st = run_command(shardguard_bin() + " status --json --run-dir " + d.run());
  REQUIRE(st.exit_code == 0);
  spit(status_json, st.out);
  auto rep = run_command(shardguard_bin() + " report --run-dir " + d.run());
  REQUIRE(rep.exit_code == 0);
  spit(report, rep.out);

  auto check = run_command(check_script(d, status_json, report));
  INFO("goodput_check: " << check.out << check.err);
  CHECK(check.exit_code == 0);
  CHECK(check.err.find("DISAGREE") == std::string::npos);
  // Time was lost to every cause but waiting, so the comparison covers real figures.
  for (const char* cause : {"\"recompute\": 0.0,", "\"restart\": 0.0,", "\"checkpoint\": 0.0,"})
    CHECK(check.out.find(cause) == std::string::npos);

  // The human page says it in the same figures, in human units.
  auto page = run_command(shardguard_bin() + " status --run-dir " + d.run());
  REQUIRE(page.exit_code == 0);
  CHECK_THAT(page.out, Catch::Contains("goodput      "));
  // Budgets belong to one `shardguard run`: the crash was in the first.
  CHECK_THAT(page.out, Catch::Contains("crash: 0 used (1 over all runs)"));
  CHECK_THAT(page.out, Catch::Contains("sigterm (signal sigterm, stop, 20.0 s left)"));
  CHECK_THAT(page.out, Catch::Contains("succeeded (exit 0)"));
  // No number in exponent form (a number, not part of a word or a path, then e/E and digits).
  CHECK_FALSE(
      std::regex_search(page.out + slurp(status_json) + slurp(report),
                        std::regex("(^|[^A-Za-z0-9_./-])[0-9]+(\\.[0-9]+)?[eE][-+]?[0-9]")));

  // The comparison can fail: a printed figure 3 % off is caught.
  auto bad = run_command(check_script(d, doctored(d, status_json, 1.03), ""));
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.err, Catch::Contains("DISAGREE status: ratio"));
}
