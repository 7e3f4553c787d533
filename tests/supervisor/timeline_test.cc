// The timeline model on hand-written events.jsonl timelines: state, steps, restarts, notices,
// evidence, malformed lines, several runs, and goodput worked out by hand.
#include "supervisor/timeline.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "supervisor/timeline_text.h"
#include "tests/supervisor/timeline_lines.h"

using namespace shardguard;
using namespace shardguard::supervisor;
using policies::Badput;

TEST_CASE("Crash and relaunch: goodput worked out by hand", "[timeline][unit]") {
  Timeline t = feed(crash_and_relaunch());
  const TimelineView v = t.view(10'000'000);  // finished: `now` adds nothing
  const auto& g = v.goodput;
  // 2 GPUs x 9.9 s from start to finish.
  CHECK(g.allocated_gpu_seconds == Approx(19.8));
  // start -> launch 0.1 s, launching 1.0 + 0.5 s, teardown -> relaunch 0.2 s, last stop 0.1 s.
  CHECK(g.badput(Badput::kRestart) == Approx(2 * 1.9));
  CHECK(g.badput(Badput::kCheckpoint) == Approx(2 * 0.3));
  // Attempt 0 trained 3.9 s for 200 steps; 100 were lost: 1.95 s on 2 GPUs.
  CHECK(g.badput(Badput::kRecompute) == Approx(3.9));
  CHECK(g.badput(Badput::kWaiting) == Approx(0));
  CHECK(g.productive_gpu_seconds == Approx(2 * (3.9 + 3.8) - 3.9));
  CHECK(g.productive_gpu_seconds + g.badput_total() == Approx(g.allocated_gpu_seconds));

  CHECK(v.state == "succeeded");
  CHECK(v.finished);
  CHECK(v.step == 300u);
  CHECK(v.lost_steps == 100);
  REQUIRE(v.attempts.size() == 2);
  CHECK(v.attempts[0].end_class == "crash");
  CHECK(v.attempts[0].lost_steps == 100);
  CHECK(v.attempts[0].lost_seconds == Approx(1.95));
  CHECK(v.attempts[0].backoff_seconds == Approx(0.05));
  CHECK(v.attempts[0].steps_per_second == Approx(200 / 3.9));
  CHECK(v.attempts[1].resume_step == 100u);
  CHECK_FALSE(v.attempts[0].resume_step.has_value());
  REQUIRE(v.last_checkpoint);
  CHECK(v.last_checkpoint->step == 200);
  CHECK(v.checkpoints == 2);
  REQUIRE(v.restarts.size() == 1);
  CHECK(v.restarts[0].exit_class == "crash");
  CHECK(v.restarts[0].used == 1);
  CHECK_FALSE(v.restarts[0].left.has_value());  // no budgets given: used only
  REQUIRE(v.runs.size() == 1);
  CHECK(v.runs[0].exit_code == 0);
  CHECK(v.skipped_lines == 0);
  CHECK(v.records == crash_and_relaunch().size());
}

TEST_CASE("The state follows the records of every kind", "[timeline][unit]") {
  const auto all = crash_and_relaunch();
  // After the first n lines, the run is in this state.
  auto [n, state] = GENERATE(table<size_t, std::string>({{1, "pending"},
                                                         {2, "pending"},
                                                         {3, "launching"},
                                                         {5, "launching"},
                                                         {6, "running"},
                                                         {7, "running"},
                                                         {9, "stopping"},
                                                         {11, "stopping"},
                                                         {12, "backoff"},
                                                         {13, "launching"},
                                                         {14, "running"},
                                                         {17, "stopping"},
                                                         {19, "succeeded"}}));
  Timeline t = feed(std::vector<std::string>(all.begin(), all.begin() + long(n)));
  INFO("after " << n << " records");
  CHECK(t.view(9900).state == state);
}

TEST_CASE("Every record kind is described in one escaped line", "[timeline][unit]") {
  auto [line, contains] = GENERATE(table<std::string, std::string>({
      {L(1, "start", R"j("job_id":"j","nproc":2,"first_attempt":3)j"),
       "job j, 2 ranks, first attempt 3"},
      {L(1, "node_joined", R"j("node":0,"nodes":1)j"), "node 0 joined"},
      {L(1, "node_lost", R"j("node":1,"why":"no heartbeat","nodes":1)j"),
       "node 1 lost: no heartbeat"},
      {L(1, "launch", R"j("attempt":2,"nproc":3,"resume_step":-1)j"),
       "attempt 2: 3 ranks, fresh start"},
      {L(1, "launch", R"j("attempt":2,"nproc":1,"resume_step":300)j"),
       "1 rank, resuming from step 300"},
      {L(1, "launch_failed", R"j("attempt":0,"node":0,"error":"ENOENT","transient":false)j"),
       "launch failed on node 0: ENOENT"},
      {L(1, "hello", R"j("attempt":0,"rank":1,"pid":42)j"), "rank 1 connected (pid 42)"},
      {L(1, "ranks_ready", R"j("attempt":0,"seconds_since_launch":2.5560896E-2)j"),
       "26 ms after the launch"},
      {L(1, "checkpoint_now",
         R"j("attempt":0,"at_step":120,"kind":"emergency","reason":"aws-spot","deadline_unix_ms":5,"seconds_left":118.5)j"),
       "emergency checkpoint of step 120 requested (aws-spot), 2.0 min left"},
      {L(1, "checkpoint_committed",
         R"j("attempt":0,"step":50,"seconds":0.013,"manifest":"m","bytes":1610612736)j"),
       "step 50 committed in 13 ms, 1.50 GiB"},
      {L(1, "checkpoint_failed",
         R"j("attempt":0,"rank":1,"step":50,"error":"No space left on device","no_space":true)j"),
       "rank 1 could not save step 50: No space"},
      {L(1, "notice",
         R"j("node":0,"source":"aws","kind":"spot-interruption","reason":"aws-spot-interruption","action":"stop","preemption":true,"seconds_left":120)j"),
       "aws-spot-interruption (aws spot-interruption, stop, 2.0 min left)"},
      {L(1, "deadline_shortened", R"j("reason":"sigterm","seconds_left":30)j"),
       "deadline shortened (sigterm): 30.0 s left"},
      {L(1, "node_unhealthy",
         R"j("node":0,"evidence":"xid: Xid 79 (GPU has fallen off the bus)")j"),
       "node 0 unhealthy: xid: Xid 79"},
      {L(1, "hang", R"j("attempt":0,"rank":1,"step":120,"seconds_since_heartbeat":1.3)j"),
       "rank 1 hung at step 120 (no heartbeat for 1.3 s)"},
      {L(1, "hang_report", R"j("attempt":0,"rank":1,"report":"/r/hang-rank-1.txt")j"),
       "what it was doing is in /r/hang-rank-1.txt"},
      {L(1, "teardown", R"j("attempt":0,"why":"every rank exited")j"),
       "attempt 0: teardown: every rank exited"},
      {L(1, "rank_exit",
         R"j("attempt":0,"rank":0,"status":"exited with code 0","killed_by_us":true)j"),
       "rank 0 exited with code 0 (stopped by the supervisor)"},
      {L(1, "attempt_end",
         R"j("attempt":0,"class":"crash","detail":"rank 1 exited with code 3","seconds":3700,"max_step":90,"lost_steps":40)j"),
       "ended: crash (rank 1 exited with code 3) after 1.0 h, step 90, 40 steps lost"},
      {L(1, "backoff", R"j("attempt":0,"seconds":0.01,"why":"crash: restart 1 of 3")j"),
       "restart in 10 ms: crash: restart 1 of 3"},
      {L(1, "give_up", R"j("attempt":3,"class":"crash","why":"crash: 3 restarts within 1h")j"),
       "gave up (crash): crash: 3 restarts"},
      {L(1, "finish",
         R"j("state":"preempted","exit_code":75,"attempts":1,"summary":"emergency checkpoint of step 120 committed")j"),
       "run preempted, exit 75: emergency checkpoint"},
      {L(1, "resume_skipped", R"j("step":300,"state":"corrupt","why":"bad size")j"),
       "resume skips step 300 (corrupt): bad size"},
      {L(1, "resume_failed",
         R"j("attempt":1,"rank":0,"manifest":"m","file":"f","offset":4096,"error":"checksum")j"),
       "rank 0 could not resume from m (f at offset 4096): checksum"},
      {L(1, "quarantined", R"j("step":300,"path":"/c/quarantine/x","reason":"NaN")j"),
       "step 300 set aside in /c/quarantine/x: NaN"},
      {L(1, "quarantine_failed", R"j("step":300,"error":"EACCES")j"),
       "could not set step 300 aside: EACCES"},
      {L(1, "implausible_step", R"j("attempt":0,"rank":0,"step":99999999999,"previous":5)j"),
       "reported step 99999999999 after 5: ignored"},
      {L(1, "shrink", R"j("nodes":2,"why":"notified nodes leave")j"), "continuing on 2 nodes"},
      {L(1, "stale_commit", R"j("attempt":0,"step":5,"manifest":"m")j"),
       "commit of step 5 by an older attempt 0 ignored"},
      {L(1, "something_new", R"j("a":1,"b":"x")j"), "a=1 b=x"},
      // A reason cannot forge a line or drive the terminal.
      {L(1, "teardown", R"j("attempt":0,"why":"ok\n2024 finish succeeded\u001b[2J")j"),
       "ok\\n2024 finish succeeded\\x1b[2J"},
  }));
  auto r = parse_timeline_line(line);
  REQUIRE(r);
  const std::string text = describe_record(*r);
  CHECK_THAT(text, Catch::Contains(contains));
  CHECK(text.find('\n') == std::string::npos);
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK(text.find("E-") == std::string::npos);
  // Feeding any single record never throws and counts it.
  Timeline t;
  t.add(*r);
  CHECK(t.view(2).records == 1);
}

TEST_CASE("A preemption: emergency checkpoint, drain, exit 75, and a second run resumes",
          "[timeline][unit]") {
  std::vector<std::string> lines = {
      L(0, "start", R"j("job_id":"j","nproc":2,"first_attempt":0)j"),
      L(0, "node_joined", R"j("node":0,"nodes":1)j"),
      L(0, "launch", R"j("attempt":0,"nproc":2,"resume_step":-1)j"),
      L(1000, "ranks_ready", R"j("attempt":0,"seconds_since_launch":1)j"),
      L(5000, "notice",
        R"j("node":0,"source":"aws","kind":"spot-interruption","reason":"aws-spot-interruption","action":"stop","preemption":true,"deadline_unix_ms":125000,"seconds_left":120)j"),
      L(5000, "checkpoint_now",
        R"j("attempt":0,"at_step":400,"kind":"emergency","reason":"aws-spot-interruption","deadline_unix_ms":123000,"seconds_left":118)j"),
      L(6000, "checkpoint_committed",
        R"j("attempt":0,"step":400,"seconds":0.5,"manifest":"m400")j"),
      L(6500, "teardown", R"j("attempt":0,"why":"every rank exited")j"),
      L(6600, "attempt_end",
        R"j("attempt":0,"class":"preempted","detail":"","seconds":6.6,"max_step":400,"lost_steps":0)j"),
      L(6600, "finish",
        R"j("state":"preempted","exit_code":75,"attempts":1,"summary":"emergency checkpoint of step 400 committed")j"),
  };
  SECTION("the first run") {
    const TimelineView v = feed(lines).view(50'000);
    CHECK(v.state == "preempted");
    CHECK(v.finished);
    // 6.6 s on 2 GPUs; training 1.0 -> 6.0 s minus the 0.5 s save; the drain is stopping.
    CHECK(v.goodput.allocated_gpu_seconds == Approx(13.2));
    CHECK(v.goodput.productive_gpu_seconds == Approx(2 * 4.5));
    CHECK(v.goodput.badput(Badput::kCheckpoint) == Approx(2 * 0.5));
    CHECK(v.goodput.badput(Badput::kRestart) == Approx(2 * 1.6));
    REQUIRE(v.notices.size() == 1);
    CHECK(v.notices[0].source == "aws");
    CHECK(v.notices[0].preemption);
    CHECK(v.notices[0].seconds_left == Approx(120));
    REQUIRE(v.last_checkpoint);
    CHECK(v.last_checkpoint->emergency);
    CHECK(v.restarts.empty());  // a preempted run that stops is no restart
  }
  SECTION("a second run an hour later: the gap between the runs is not allocated") {
    const int64_t h = 3'600'000;
    lines.push_back(L(h, "start", R"j("job_id":"j","nproc":3,"first_attempt":1)j"));
    lines.push_back(L(h, "node_joined", R"j("node":0,"nodes":1)j"));
    lines.push_back(L(h + 200, "launch", R"j("attempt":1,"nproc":3,"resume_step":400)j"));
    lines.push_back(L(h + 700, "ranks_ready", R"j("attempt":1,"seconds_since_launch":0.5)j"));
    lines.push_back(L(h + 4700, "teardown", R"j("attempt":1,"why":"every rank exited")j"));
    lines.push_back(L(h + 4700, "attempt_end",
                      R"j("attempt":1,"class":"success","max_step":600,"lost_steps":0)j"));
    lines.push_back(L(h + 4700, "finish", R"j("state":"succeeded","exit_code":0,"attempts":2)j"));
    const TimelineView v = feed(lines).view(2 * h);
    CHECK(v.runs.size() == 2);
    CHECK(v.goodput.allocated_gpu_seconds == Approx(13.2 + 3 * 4.7));
    CHECK(v.goodput.productive_gpu_seconds == Approx(9.0 + 3 * 4.0));
    CHECK(v.state == "succeeded");
    CHECK(v.step == 600u);
    CHECK(v.nproc == 3);
    CHECK(v.steps_per_second == Approx(200 / 4.0));
  }
}

TEST_CASE("Restarts used and left per class, from the budgets and their window",
          "[timeline][unit]") {
  std::vector<std::string> lines = {L(0, "start", R"j("nproc":1)j")};
  int64_t t = 0;
  for (uint64_t a = 0; a < 3; ++a) {
    const std::string att = "\"attempt\":" + std::to_string(a);
    lines.push_back(L(t += 10, "launch", att + R"j(,"nproc":1,"resume_step":-1)j"));
    lines.push_back(L(t += 10, "ranks_ready", att));
    lines.push_back(L(t += 1000, "teardown", att + R"j(,"why":"x")j"));
    const char* cls = a == 2 ? "hang" : a == 1 ? "no_progress" : "crash";
    lines.push_back(L(t += 10, "attempt_end",
                      att + ",\"class\":\"" + cls + "\",\"max_step\":0,\"lost_steps\":0"));
    lines.push_back(L(t, "backoff", att + R"j(,"seconds":1)j"));
  }
  TimelineOptions o;
  o.budgets = {{"crash", {3, std::chrono::hours(1)}},
               {"hang", {2, std::chrono::minutes(1)}},
               {"preempted", {100, std::chrono::hours(24)}}};
  Timeline tl = feed(lines, o);
  auto find = [](const TimelineView& v, const std::string& cls) {
    for (const auto& r : v.restarts)
      if (r.exit_class == cls) return r;
    FAIL("no class " << cls);
    return RestartCount{};
  };
  SECTION("within the windows") {
    const TimelineView v = tl.view(t + 1000);
    CHECK(find(v, "crash").used == 2);  // no_progress spends the crash budget
    CHECK(find(v, "crash").left == 1u);
    CHECK(find(v, "hang").used == 1);
    CHECK(find(v, "hang").left == 1u);
    CHECK(find(v, "preempted").used == 0);
    CHECK(find(v, "preempted").left == 100u);
    CHECK(v.state == "backoff");
  }
  SECTION("after the hang window has passed") {
    const TimelineView v = tl.view(t + 120'000);
    CHECK(find(v, "hang").left == 2u);
    CHECK(find(v, "crash").left == 1u);
  }
}

TEST_CASE("Malformed and hand-edited lines are skipped and counted, never a crash",
          "[timeline][unit]") {
  auto lines = crash_and_relaunch();
  lines.insert(lines.begin() + 3, R"({"time_unix_ms":150,"event":"hel)");  // torn write
  lines.insert(lines.begin() + 3, "not json at all");
  lines.insert(lines.begin() + 3, "[1,2,3]");
  lines.insert(lines.begin() + 3, R"j({"event":"launch","attempt":9})j");  // no time
  lines.insert(lines.begin() + 3, R"j({"time_unix_ms":"soon","event":"launch"})j");
  lines.insert(lines.begin() + 3, R"j({"time_unix_ms":150,"event":7})j");
  lines.insert(lines.begin() + 3, std::string("\xff\xfe\x00\x1b[2J", 7));
  lines.insert(lines.begin() + 3, "");  // blank lines are not malformed
  // Fields whose numbers do not parse are ignored; the record itself stays.
  lines.insert(lines.end() - 1,
               L(9850, "checkpoint_committed", R"j("attempt":1,"step":"lots","seconds":"slow")j"));
  lines.insert(lines.end() - 1, L(9860, "hang", R"j("attempt":1,"rank":-1,"step":1e999)j"));
  Timeline t = feed(lines);
  const TimelineView v = t.view(20'000);
  CHECK(v.skipped_lines == 7);
  CHECK(v.records == crash_and_relaunch().size() + 2);
  CHECK(v.state == "succeeded");
  CHECK(v.lost_steps == 100);
  CHECK(v.step == 300u);
  CHECK(v.goodput.allocated_gpu_seconds == Approx(19.8));

  SECTION("typed getters ignore what does not parse") {
    auto r = parse_timeline_line(
        R"j({"time_unix_ms":1,"event":"x","a":"12","b":"1.5","c":-3,"d":2.5,"e":"12x","f":null,"g":[1],"h":true,"i":1e999})j");
    REQUIRE(r);
    // 1e999 does not fit a double: Boost.JSON reads it as infinity, which is no number here.
    CHECK_FALSE(r->number("i"));
    CHECK_FALSE(r->count("i"));
    CHECK(r->count("a") == 12u);
    CHECK(r->number("b") == Approx(1.5));
    CHECK_FALSE(r->count("b"));
    CHECK_FALSE(r->count("c"));
    CHECK(r->number("c") == Approx(-3));
    CHECK_FALSE(r->count("d"));
    CHECK_FALSE(r->number("e"));
    CHECK(r->text("f") == "null");
    CHECK(r->text("g") == "[1]");
    CHECK(r->flag("h") == true);
    CHECK_FALSE(r->count("missing"));
    CHECK(r->text("missing").empty());
  }
}

TEST_CASE("Two runs where the first supervisor was killed: it ends at its last record",
          "[timeline][unit]") {
  std::vector<std::string> lines = {
      L(0, "start", R"j("nproc":1)j"),
      L(0, "launch", R"j("attempt":0,"nproc":1,"resume_step":-1)j"),
      L(1000, "ranks_ready", R"j("attempt":0)j"),
      L(3000, "checkpoint_committed", R"j("attempt":0,"step":30,"seconds":0)j"),
      // kill -9 of `shardguard run`: nothing more from this run; the next starts 10 s later.
      L(13000, "start", R"j("nproc":1)j"),
      L(13000, "launch", R"j("attempt":1,"nproc":1,"resume_step":30)j"),
      L(14000, "ranks_ready", R"j("attempt":1)j"),
  };
  Timeline t = feed(lines);
  const TimelineView v = t.view(16000);  // the second run is live: 2 s of training so far
  REQUIRE(v.runs.size() == 2);
  CHECK(v.runs[0].last_unix_ms == 3000);
  CHECK_FALSE(v.runs[0].finish_unix_ms);
  REQUIRE(v.attempts.size() == 2);
  CHECK(v.attempts[0].end_class == "unknown");
  CHECK(v.goodput.allocated_gpu_seconds == Approx(3.0 + 3.0));
  CHECK(v.goodput.productive_gpu_seconds == Approx(2.0 + 2.0));
  CHECK(v.goodput.badput(Badput::kRestart) == Approx(2.0));
  CHECK(v.state == "running");
  CHECK_FALSE(v.finished);
  CHECK(v.attempt == 1u);
  CHECK(v.step == 30u);
  CHECK(v.step_source == "resume");
  CHECK(v.steps_per_second == Approx(30 / 2.0));  // attempt 0's pace to its commit
  CHECK(t.goodput(16000).allocated_gpu_seconds == Approx(6.0));
  CHECK(t.goodput(17000).allocated_gpu_seconds == Approx(7.0));
}

TEST_CASE("A hang: training ends at the last heartbeat; the rest is restart", "[timeline][unit]") {
  const TimelineView v =
      feed({
               L(0, "start", R"j("nproc":1)j"),
               L(0, "launch", R"j("attempt":0,"nproc":1,"resume_step":-1)j"),
               L(0, "ranks_ready", R"j("attempt":0)j"),
               L(10000, "hang", R"j("attempt":0,"rank":0,"step":100,"seconds_since_heartbeat":4)j"),
               L(11000, "teardown", R"j("attempt":0,"why":"rank 0 hung")j"),
               L(11000, "attempt_end",
                 R"j("attempt":0,"class":"hang","max_step":100,"lost_steps":100)j"),
               L(11000, "finish", R"j("state":"failed","exit_code":76)j"),
           })
          .view(11000);
  // 6 s of training for 100 steps, all lost; 5 s hung and stopping.
  CHECK(v.goodput.allocated_gpu_seconds == Approx(11));
  CHECK(v.goodput.badput(Badput::kRecompute) == Approx(6));
  CHECK(v.goodput.badput(Badput::kRestart) == Approx(5));
  CHECK(v.goodput.productive_gpu_seconds == Approx(0));
  REQUIRE(v.evidence.size() == 1);
  CHECK(v.evidence[0].type == "hang");
}

TEST_CASE("A job that never heartbeats trains from its launch when it ends in success",
          "[timeline][unit]") {
  auto run = [](const std::string& cls) {
    return feed({
                    L(0, "start", R"j("nproc":2)j"),
                    L(0, "launch", R"j("attempt":0,"nproc":2,"resume_step":-1)j"),
                    L(5000, "teardown", R"j("attempt":0,"why":"every rank exited")j"),
                    L(5000, "attempt_end",
                      "\"attempt\":0,\"class\":\"" + cls + "\",\"max_step\":0,\"lost_steps\":0"),
                    L(5000, "finish", R"j("state":"x")j"),
                })
        .view(5000)
        .goodput;
  };
  CHECK(run("success").productive_gpu_seconds == Approx(10));
  CHECK(run("crash").productive_gpu_seconds == Approx(0));
  CHECK(run("crash").badput(Badput::kRestart) == Approx(10));
}

TEST_CASE("A live run counts its open phase up to now", "[timeline][unit]") {
  Timeline t = feed({
      L(0, "start", R"j("nproc":4)j"),
      L(0, "launch", R"j("attempt":0,"nproc":4,"resume_step":-1)j"),
      L(1000, "ranks_ready", R"j("attempt":0)j"),
      L(3000, "checkpoint_committed", R"j("attempt":0,"step":100,"seconds":0)j"),
  });
  const TimelineView v = t.view(11000);
  CHECK(v.state == "running");
  CHECK(v.goodput.allocated_gpu_seconds == Approx(44));
  CHECK(v.goodput.productive_gpu_seconds == Approx(40));
  CHECK(v.attempts.back().training_seconds == Approx(10));
  CHECK(v.steps_per_second == Approx(50));
  CHECK(v.step == 100u);
  CHECK(v.step_source == "checkpoint");
}

TEST_CASE("Prometheus text: goodput ratio and badput by cause, never an exponent",
          "[timeline][unit]") {
  policies::GoodputAccumulator a;
  a.training(90, 2);
  a.badput(Badput::kRestart, 0.0000125, 2);
  a.badput(Badput::kCheckpoint, 10, 2);
  a.lose(5, 2);
  const std::string text = goodput_metrics(a.totals());
  CHECK_THAT(text, Catch::Contains("# TYPE shardguard_goodput_ratio gauge"));
  CHECK_THAT(text, Catch::Contains("shardguard_goodput_ratio 0.8"));
  CHECK_THAT(text, Catch::Contains("shardguard_badput_seconds_total{cause=\"recompute\"} 10\n"));
  CHECK_THAT(text, Catch::Contains("shardguard_badput_seconds_total{cause=\"checkpoint\"} 20\n"));
  CHECK_THAT(text, Catch::Contains("shardguard_badput_seconds_total{cause=\"waiting\"} 0\n"));
  CHECK_THAT(text, Catch::Contains("shardguard_allocated_gpu_seconds_total 200\n"));
  CHECK(text.find("e-") == std::string::npos);
  CHECK(text.find("E-") == std::string::npos);
  CHECK(text.find("e+") == std::string::npos);
}

TEST_CASE("Human units", "[timeline][unit]") {
  CHECK(human_seconds(0.013) == "13 ms");
  CHECK(human_seconds(4.24) == "4.2 s");
  CHECK(human_seconds(210) == "3.5 min");
  CHECK(human_seconds(7560) == "2.1 h");
  CHECK(human_seconds(86400 * 21) == "21.0 d");
  CHECK(human_gpu_seconds(12.34) == "12.3 GPU-s");
  CHECK(human_gpu_seconds(7560) == "2.1 GPU-h");
  CHECK(percent(0.8734) == "87.3 %");
  CHECK(plain_number(2.5560896E-2) == "0.025561");
  CHECK(plain_number(1e20, 0) == "100000000000000000000");
  CHECK(plain_number(-0.0) == "0");
  CHECK(utc_time(1'700'000'000'123) == "2023-11-14 22:13:20.123");
}
