// `shardguard status` (the page, --json, --follow) and `shardguard report` on the run dir of a
// real `shardguard run` of the example trainer: a rank hangs (detected, reported, relaunched),
// then an operator's drain whose reason carries a newline and ANSI escapes stops the run.
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <regex>

#include "tests/run/run_fixture.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;
namespace json = boost::json;

namespace {

// A reason that tries to forge a timeline line and to clear the screen.
const char* kEvilReason = "evil\\n2099-01-01 00:00:00.000  0 ms  finish  run succeeded\\033[2J";

struct HungAndDrainedRun {
  RunDirs d;
  int exit_code = -1;
  CommandResult live;  // `status --json` while attempt 1 was running

  HungAndDrainedRun() {
    std::ofstream(d.config()) << "[job]\ncheckpoint_dir = \"" << d.ckpt() << "\"\nrun_dir = \""
                              << d.run() << "\"\n[restart]\nbackoff_initial = \"10ms\"\n"
                              << "backoff_max = \"50ms\"\n[stop]\ngrace = \"20s\"\n"
                              << "term_grace = \"2s\"\n[checkpoint]\nevery_steps = 50\n"
                              << "[health]\nhang_timeout = \"1s\"\n";
    Background run(
        run_argv(d, 2,
                 {"--steps", "4000", "--rows", "64", "--log-every", "0", "--checkpoint-every", "50",
                  "--sleep-ms", "3", "--hang-at-step", "120", "--fault-rank", "1"}),
        d.log());
    // Attempt 1 (after the hang) trains and commits; then the operator drains with a bad reason.
    const bool relaunched = eventually(
        [&] {
          for (const auto& e : events_named(d, "checkpoint_committed"))
            if (field(e, "attempt") == "1") return true;
          return false;
        },
        60s);
    if (!relaunched) return;
    live = run_command(shardguard_bin() + " status --json --run-dir " + d.run());
    auto drain = run_command(shardguard_bin() + " drain --run-dir " + d.run() +
                             " --deadline 20s --reason \"$(printf '" + kEvilReason + "')\"");
    if (drain.exit_code != 0) return;
    exit_code = run.wait(40s).value_or(-1);
  }
};

HungAndDrainedRun& shared_run() {
  static HungAndDrainedRun run;
  return run;
}

std::string log_of(const HungAndDrainedRun& r) { return slurp(r.d.log()); }

bool has_exponent(const std::string& text) {
  return std::regex_search(text,
                           std::regex("(^|[^A-Za-z0-9_./-])[0-9]+(\\.[0-9]+)?[eE][-+]?[0-9]"));
}

// No line of `text` starts with the forged timestamp, and no ESC byte survives.
void check_not_forged(const std::string& text) {
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK_FALSE(std::regex_search(text, std::regex("(^|\n)[| ]*2099-01-01")));
}

}  // namespace

TEST_CASE("status: the page for a person after a hang and a drain", "[status][integration]") {
  auto& r = shared_run();
  INFO(log_of(r));
  REQUIRE(r.exit_code == 75);
  auto page = run_command(shardguard_bin() + " status --run-dir " + r.d.run() + " --config " +
                          r.d.config() + " --lines 0");
  REQUIRE(page.exit_code == 0);
  INFO(page.out);
  CHECK_THAT(page.out, Catch::Contains("state        preempted (exit 75)"));
  CHECK_THAT(page.out, Catch::Contains("hang: 1 used, 2 of 3 left per 1.0 h"));
  CHECK_THAT(page.out, Catch::Contains("none yet: crash (3 per 1.0 h)"));
  CHECK_THAT(page.out, Catch::Contains("checkpoint   step "));
  CHECK_THAT(page.out, Catch::Contains("emergency"));
  CHECK_THAT(page.out, Catch::Contains(" KiB"));  // the checkpoint's size, read from its manifest
  CHECK_THAT(page.out, Catch::Matches("[\\s\\S]*lost steps   [1-9][0-9]* in 1 attempt[\\s\\S]*"));
  CHECK_THAT(page.out,
             Catch::Matches("[\\s\\S]*goodput      [0-9]+\\.[0-9] % - productive[\\s\\S]*"));
  CHECK_THAT(page.out, Catch::Contains("hang_report"));
  // The drain's reason is shown, escaped: no forged line, no escape sequence.
  CHECK_THAT(page.out, Catch::Contains("drain: evil\\n2099-01-01"));
  CHECK_THAT(page.out, Catch::Contains("\\x1b[2J"));
  check_not_forged(page.out);
  CHECK_FALSE(has_exponent(page.out));
}

TEST_CASE("status of a live run: the supervisor answers, time counts up to now",
          "[status][integration]") {
  auto& r = shared_run();
  REQUIRE(r.exit_code == 75);
  REQUIRE(r.live.exit_code == 0);
  INFO(r.live.out);
  boost::system::error_code ec;
  json::value v = json::parse(r.live.out, ec);
  REQUIRE_FALSE(ec);
  const json::object& o = v.as_object();
  CHECK(o.at("supervisor_alive").as_bool());
  CHECK_FALSE(o.at("finished").as_bool());
  CHECK(o.at("attempt").as_int64() == 1);
  const std::string state(o.at("state").as_string());
  CHECK((state == "running" || state == "checkpointing"));
  // The open phase runs to now, past the last record.
  CHECK(o.at("now_unix_ms").as_int64() >= o.at("last_unix_ms").as_int64());
  CHECK(o.at("goodput").as_object().at("allocated_gpu_seconds").to_number<double>() > 0);
}

TEST_CASE("status --json: the machine form", "[status][integration]") {
  auto& r = shared_run();
  REQUIRE(r.exit_code == 75);
  auto out = run_command(shardguard_bin() + " status --json --run-dir " + r.d.run() + " --config " +
                         r.d.config());
  REQUIRE(out.exit_code == 0);
  INFO(out.out);
  CHECK_FALSE(has_exponent(out.out));
  // Pure ASCII: safe on any terminal.
  CHECK(std::count_if(out.out.begin(), out.out.end(), [](char c) { return (c & 0x80) != 0; }) == 0);
  boost::system::error_code ec;
  json::value v = json::parse(out.out, ec);
  REQUIRE_FALSE(ec);
  const json::object& o = v.as_object();
  CHECK(o.at("version").as_int64() == 1);
  CHECK(o.at("state").as_string() == "preempted");
  CHECK(o.at("finished").as_bool());
  CHECK_FALSE(o.at("supervisor_alive").as_bool());
  CHECK(o.at("lost_steps").as_int64() > 0);
  CHECK(o.at("last_checkpoint").as_object().at("emergency").as_bool());
  CHECK(o.at("last_checkpoint").as_object().at("bytes").as_int64() > 0);
  const auto& g = o.at("goodput").as_object();
  const double ratio = g.at("ratio").to_number<double>();
  CHECK(ratio > 0.0);
  CHECK(ratio < 1.0);
  const auto& bad = g.at("badput_gpu_seconds").as_object();
  double sum = g.at("productive_gpu_seconds").to_number<double>();
  for (const char* c : {"recompute", "restart", "checkpoint", "waiting"})
    sum += bad.at(c).to_number<double>();
  CHECK(sum == Approx(g.at("allocated_gpu_seconds").to_number<double>()).margin(0.01));
  bool hang_budget = false;
  for (const auto& rc : o.at("restarts").as_array()) {
    const auto& c = rc.as_object();
    if (c.at("class").as_string() != "hang") continue;
    hang_budget =
        c.at("used").as_int64() == 1 && c.at("max").as_int64() == 3 && c.at("left").as_int64() == 2;
  }
  CHECK(hang_budget);
  const auto& notices = o.at("notices").as_array();
  REQUIRE(notices.size() == 1);
  const std::string reason(notices[0].as_object().at("reason").as_string());
  CHECK(reason.find("evil\n2099") != std::string::npos);  // exact in the machine form
  CHECK(reason.find("\x1b[2J") != std::string::npos);
  std::vector<std::string> evidence;
  for (const auto& e : o.at("evidence").as_array())
    evidence.emplace_back(e.as_object().at("event").as_string());
  CHECK(std::count(evidence.begin(), evidence.end(), "hang") == 1);
  CHECK(std::count(evidence.begin(), evidence.end(), "hang_report") == 1);
  REQUIRE(o.at("attempts").as_array().size() == 2);
  CHECK(o.at("attempts").as_array()[0].as_object().at("class").as_string() == "hang");
  CHECK(o.at("timeline").as_array().size() ==
        std::min<size_t>(40, size_t(o.at("records").as_int64())));  // --lines defaults to 40
}

TEST_CASE("report: a one-page Markdown incident report", "[report][integration]") {
  auto& r = shared_run();
  REQUIRE(r.exit_code == 75);
  auto out = run_command(shardguard_bin() + " report --run-dir " + r.d.run());
  REQUIRE(out.exit_code == 0);
  INFO(out.out);
  const std::string& md = out.out;
  for (const char* heading :
       {"# Incident report: job job-", "## Summary", "## Lost time by cause",
        "## Attempts and the causes of each restart", "## Timeline", "## Evidence", "### Notices",
        "### Hang reports", "### Node health", "### Checkpoint problems"})
    CHECK_THAT(md, Catch::Contains(heading));
  CHECK_THAT(md, Catch::Contains("| **Goodput** | **"));
  CHECK_THAT(md, Catch::Contains("| hang | "));
  CHECK_THAT(md, Catch::Contains("rank 1 hung"));
  // The hang report's path and its first lines, as an indented code block.
  const auto reports = events_named(r.d, "hang_report");
  REQUIRE(reports.size() == 1);
  CHECK_THAT(md, Catch::Contains(field(reports[0], "report").substr(0, 20)));
  CHECK(std::regex_search(md, std::regex("\n    [^\n]*(pid|wchan|state)")));
  // The notice, with its source; the reason escaped for both the terminal and Markdown.
  CHECK_THAT(md, Catch::Contains("from **drain**: drain: evil"));
  CHECK_THAT(md, Catch::Contains("evil\\\\n2099"));
  check_not_forged(md);
  CHECK_FALSE(has_exponent(md));
}

TEST_CASE("The goodput of the hung and drained run agrees with the independent recomputation",
          "[status][report][integration]") {
  auto& r = shared_run();
  REQUIRE(r.exit_code == 75);
  TempDir t;
  spit(t / "status.json",
       run_command(shardguard_bin() + " status --json --run-dir " + r.d.run()).out);
  spit(t / "report.md", run_command(shardguard_bin() + " report --run-dir " + r.d.run()).out);
  auto check = run_command(std::string(SG_PYTHON) + " " + SG_GOODPUT_CHECK + " " + r.d.run() +
                           "/events.jsonl --status-json " + (t / "status.json") + " --report " +
                           (t / "report.md"));
  INFO(check.out << check.err);
  CHECK(check.exit_code == 0);
}

TEST_CASE("status survives malformed lines and says how many it skipped", "[status][integration]") {
  auto& r = shared_run();
  REQUIRE(r.exit_code == 75);
  TempDir t;
  const std::string run = t / "run";
  std::filesystem::create_directories(run);
  spit(run + "/events.jsonl", slurp(r.d.run() + "/events.jsonl") +
                                  "{\"time_unix_ms\":1,\"event\":\"torn\n\xff\xfe garbage\n[]\n" +
                                  "{\"time_unix_ms\":2,\"event\":\"hang\",\"step\":\"many\"}\n" +
                                  "{\"time_unix_ms\":3,\"event\":\"half a li");
  auto page = run_command(shardguard_bin() + " status --run-dir " + run);
  REQUIRE(page.exit_code == 0);
  CHECK_THAT(page.out, Catch::Contains("3 malformed line(s) skipped"));
  CHECK_THAT(page.out, Catch::Contains("state        preempted"));
  auto j = run_command(shardguard_bin() + " status --json --run-dir " + run);
  CHECK_THAT(j.out, Catch::Contains("\"skipped_lines\":3"));
  auto report = run_command(shardguard_bin() + " report --run-dir " + run);
  CHECK(report.exit_code == 0);
  CHECK_THAT(report.out, Catch::Contains("3 malformed line(s) skipped"));
}

TEST_CASE("status and report of a run dir without a timeline fail with a message",
          "[status][integration]") {
  TempDir t;
  for (const char* cmd : {" status --run-dir ", " report --run-dir "}) {
    auto r = run_command(shardguard_bin() + cmd + t.path() + "/nothing");
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("events.jsonl"));
  }
  auto bad_config = run_command(shardguard_bin() + " status --run-dir " + t.path() + " --config " +
                                t.path() + "/missing.toml");
  CHECK(bad_config.exit_code == 2);
  CHECK_THAT(bad_config.err, Catch::Contains("missing.toml"));
}

TEST_CASE("status --follow streams appended records until SIGINT", "[status][integration]") {
  TempDir t;
  const std::string run = t / "run", events = t / "run/events.jsonl", out = t / "follow.out";
  std::filesystem::create_directories(run);
  spit(events,
       "{\"time_unix_ms\":1700000000000,\"event\":\"start\",\"job_id\":\"j\",\"nproc\":1}\n");
  Background follow({shardguard_bin(), "status", "--run-dir", run, "--follow", "--poll", "20ms"},
                    out);
  REQUIRE(eventually([&] { return slurp(out).find("DETAILS") != std::string::npos; }, 10s));
  {
    std::ofstream append(events, std::ios::app);
    append << "{\"time_unix_ms\":1700000001500,\"event\":\"launch\",\"attempt\":0,\"nproc\":1,"
              "\"resume_step\":-1}\n"
           << "{\"time_unix_ms\":1700000002000,\"event\":\"teardown\",\"attempt\":0,"
              "\"why\":\"x\\u001b[31m\\nforged\"}\n"
           << "not json\n"
           << "{\"time_unix_ms\":1700000003000,\"event\":\"ranks_re";  // still being written
  }
  REQUIRE(eventually([&] { return slurp(out).find("malformed line") != std::string::npos; }, 10s));
  {
    std::ofstream append(events, std::ios::app);
    append << "ady\",\"attempt\":0,\"seconds_since_launch\":1.5}\n";
  }
  REQUIRE(eventually(
      [&] { return slurp(out).find("every rank heartbeating") != std::string::npos; }, 10s));
  follow.signal(SIGINT);
  CHECK(follow.wait(5s) == 0);
  const std::string text = slurp(out);
  CHECK_THAT(text, Catch::Contains("attempt 0: 1 rank, fresh start"));
  CHECK_THAT(text, Catch::Contains("1.5 s       launch"));  // elapsed since the first record
  CHECK_THAT(text, Catch::Contains("teardown: x\\x1b[31m\\nforged"));
  CHECK(text.find('\x1b') == std::string::npos);
}

TEST_CASE("status --follow waits for a run that has not begun", "[status][integration]") {
  TempDir t;
  const std::string run = t / "run", out = t / "follow.out";
  Background follow({shardguard_bin(), "status", "--run-dir", run, "--follow", "--poll", "20ms"},
                    out);
  REQUIRE(eventually([&] { return slurp(out).find("waiting for") != std::string::npos; }, 10s));
  std::filesystem::create_directories(run);
  spit(run + "/events.jsonl",
       "{\"time_unix_ms\":1700000000000,\"event\":\"start\",\"job_id\":\"late\",\"nproc\":1}\n");
  REQUIRE(
      eventually([&] { return slurp(out).find("job late, 1 rank") != std::string::npos; }, 10s));
  follow.signal(SIGTERM);
  CHECK(follow.wait(5s) == 0);
}

TEST_CASE("status --follow --json streams JSON lines; --follow-for bounds it",
          "[status][integration]") {
  TempDir t;
  const std::string run = t / "run", events = t / "run/events.jsonl", out = t / "follow.out";
  std::filesystem::create_directories(run);
  spit(events, "{\"time_unix_ms\":1700000000000,\"event\":\"start\",\"nproc\":1}\n");
  Background bounded({shardguard_bin(), "status", "--run-dir", run, "--follow", "--json",
                      "--follow-for", "2s", "--poll", "20ms"},
                     out);
  REQUIRE(eventually([&] { return slurp(out).find("\"version\":1") != std::string::npos; }, 10s));
  std::ofstream(events, std::ios::app) << "{\"time_unix_ms\":1700000000100,\"event\":\"notice\","
                                          "\"reason\":\"r\\u001b\",\"seconds_left\":2.5e-2}\n";
  CHECK(bounded.wait(10s) == 0);  // by itself, after --follow-for
  const std::string text = slurp(out);
  CHECK_THAT(text, Catch::StartsWith("{\"version\":1,"));
  CHECK_THAT(text, Catch::Contains("\n{\"time_unix_ms\":1700000000100,\"event\":\"notice\","
                                   "\"reason\":\"r\\u001b\",\"seconds_left\":0.025}\n"));
}

TEST_CASE("report: node health and checkpoint evidence from the records", "[report][integration]") {
  TempDir t;
  const std::string run = t / "run";
  std::filesystem::create_directories(run);
  spit(run + "/events.jsonl",
       "{\"time_unix_ms\":1700000000000,\"event\":\"start\",\"job_id\":\"llm|7b\",\"nproc\":8}\n"
       "{\"time_unix_ms\":1700000000010,\"event\":\"launch\",\"attempt\":4,\"nproc\":8,\"resume_"
       "step\":1200}\n"
       "{\"time_unix_ms\":1700000000020,\"event\":\"resume_skipped\",\"step\":1500,\"state\":"
       "\"corrupt\","
       "\"why\":\"shard-00003-of-00008.safetensors: size 12 != 4096\"}\n"
       "{\"time_unix_ms\":1700000005000,\"event\":\"ranks_ready\",\"attempt\":4}\n"
       "{\"time_unix_ms\":1700000900000,\"event\":\"node_unhealthy\",\"node\":0,"
       "\"evidence\":\"xid: Xid 79 on GPU 3 (fallen off the bus) <script>\"}\n"
       "{\"time_unix_ms\":1700000900000,\"event\":\"notice\",\"source\":\"health\",\"kind\":\"node-"
       "unhealthy\","
       "\"reason\":\"node-unhealthy\",\"action\":\"stop\",\"preemption\":false,\"seconds_left\":30}"
       "\n"
       "{\"time_unix_ms\":1700000901000,\"event\":\"checkpoint_failed\",\"attempt\":4,\"rank\":3,"
       "\"step\":1800,"
       "\"error\":\"write: Input/output error\",\"no_space\":false}\n"
       "{\"time_unix_ms\":1700000902000,\"event\":\"teardown\",\"attempt\":4,\"why\":\"the "
       "emergency checkpoint failed\"}\n"
       "{\"time_unix_ms\":1700000903000,\"event\":\"attempt_end\",\"attempt\":4,\"class\":"
       "\"infrastructure\","
       "\"detail\":\"node unhealthy\",\"seconds\":903,\"max_step\":1790,\"lost_steps\":590}\n"
       "{\"time_unix_ms\":1700000903000,\"event\":\"finish\",\"state\":\"preempted\",\"exit_code\":"
       "75,"
       "\"summary\":\"emergency checkpoint FAILED\"}\n");
  auto out = run_command(shardguard_bin() + " report --run-dir " + run);
  REQUIRE(out.exit_code == 0);
  INFO(out.out);
  const std::string& md = out.out;
  CHECK_THAT(md, Catch::Contains("# Incident report: job llm\\|7b"));  // no table cell forged
  CHECK_THAT(md, Catch::Contains("node 0 unhealthy: xid: Xid 79 on GPU 3"));
  CHECK_THAT(md, Catch::Contains("&lt;script&gt;"));
  CHECK(md.find("<script>") == std::string::npos);
  CHECK_THAT(md, Catch::Contains("rank 3 could not save step 1800: write: Input/output error"));
  CHECK_THAT(md, Catch::Contains("resume skips step 1500 (corrupt)"));
  CHECK_THAT(md, Catch::Contains(
                     "from **health**: node-unhealthy (health node-unhealthy, stop, 30.0 s left)"));
  CHECK_THAT(md, Catch::Contains("| 4 | 8 | step 1200 | 15.0 min | "));
  CHECK_THAT(md, Catch::Contains("| infrastructure | node unhealthy | 590 ("));
  CHECK_THAT(md, Catch::Contains("| run preempted (exit 75) |"));
  CHECK_THAT(md, Catch::Contains("| Lost steps | 590 (about "));
}
