// Which signals Slurm sends to which processes of a job, and when: scancel, scancel
// --signal (with and without --batch), scontrol requeue, and --signal before the time limit.
// Each job runs recorders (tests/support/signal_recorder.sh): the batch shell itself
// ("batch"), a child of it ("batch.child"), an srun task ("step0") and a child of that task
// ("step0.child"). The timelines print to stdout (ctest -V shows them).
#include <signal.h>

#include <algorithm>
#include <iostream>
#include <map>

#include "tests/slurm/slurm_test_util.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

const std::vector<std::string> kAll = {"batch", "batch.child", "step0", "step0.child"};

SlurmCluster& cluster() {
  static std::unique_ptr<SlurmCluster> c = start_cluster(SlurmOptions{});
  return *c;
}

// Submits a recorder job and waits until every recorder has started.
uint32_t start_recorders(SlurmCluster& c, const std::string& log,
                         const std::vector<std::string>& args = {}) {
  const auto id = submit_or_fail(c, recorder_script({log, 1, ""}), args);
  wait_state_or_fail(c, id, {"RUNNING"}, 30s);
  for (const auto& who : kAll) wait_event(log, who, "start", 20s);
  return id;
}

// Waits (bounded) until no process of the job is left; returns when that was (unix s).
double wait_processes_gone(const SlurmCluster& c, uint32_t id, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!c.job_pids(id).empty()) {
    if (std::chrono::steady_clock::now() >= deadline) FAIL("job " << id << " processes linger");
    std::this_thread::sleep_for(50ms);
  }
  return unix_now();
}

void print_timeline(const std::string& title, const std::string& log, double t0) {
  std::cout << "--- " << title << " (t=0: the action)\n"
            << describe_events(parse_signal_log(slurp(log)), t0) << std::flush;
}

}  // namespace

TEST_CASE("slurm: scancel sends SIGCONT+SIGTERM to every process, SIGKILL after KillWait",
          "[integration]") {
  SG_SLURM_OR_SKIP();
  auto& c = cluster();
  REQUIRE(c.cancel_all_jobs().ok());
  TempDir tmp;
  const std::string log = tmp / "signals.log";
  const auto id = start_recorders(c, log);

  const double t0 = unix_now();
  REQUIRE(c.run({"scancel", std::to_string(id)})->exit_code == 0);
  // COMPLETING until every process is gone (KillWait), then CANCELLED.
  const auto completing = c.job(id);
  const double gone = wait_processes_gone(c, id, 20s);
  const auto job = wait_state_or_fail(c, id, {"CANCELLED"}, 10s);
  std::cout << "right after scancel: JobState=" << (completing.ok() ? completing->state() : "?")
            << "; CANCELLED " << (unix_now() - t0) << " s after\n";
  print_timeline("scancel", log, t0);
  const auto events = parse_signal_log(slurp(log));
  for (const auto& who : kAll) {
    INFO(who << "\n" << slurp(log));
    const auto seen = events_since(events, who, t0);
    CHECK(std::find(seen.begin(), seen.end(), "TERM") != seen.end());
    CHECK(std::find(seen.begin(), seen.end(), "exit") == seen.end());  // SIGKILLed
  }
  const int kill_wait = c.options().kill_wait_s;
  CHECK(gone - t0 >= kill_wait - 0.5);
  CHECK(gone - t0 <= kill_wait + 5);
  std::cout << "processes gone " << (gone - t0)
            << " s after scancel; ExitCode=" << job.get("ExitCode") << "\n";
  // The batch shell traps SIGTERM, so SIGKILL ended it (a shell without a trap: "0:15").
  CHECK(job.get("ExitCode") == "0:9");
  // Requeueable (JobRequeue=1), yet a user's scancel is final.
  CHECK(job.get("Requeue") == "1");
  CHECK(job.restarts() == 0);
}

TEST_CASE("slurm: scancel --signal=USR1 with and without --batch", "[integration]") {
  SG_SLURM_OR_SKIP();
  auto& c = cluster();
  REQUIRE(c.cancel_all_jobs().ok());
  TempDir tmp;
  const std::string log = tmp / "signals.log";
  const auto id = start_recorders(c, log);

  double t0 = unix_now();
  REQUIRE(c.run({"scancel", "--signal=USR1", "--batch", std::to_string(id)})->exit_code == 0);
  auto events = wait_event(log, "batch", "USR1", 10s);
  std::this_thread::sleep_for(1s);  // time for any other process to log it too
  print_timeline("scancel --signal=USR1 --batch", log, t0);
  events = parse_signal_log(slurp(log));
  CHECK(events_since(events, "batch", t0) == std::vector<std::string>{"USR1"});
  for (const auto& who : {"batch.child", "step0", "step0.child"})
    CHECK(events_since(events, who, t0).empty());

  t0 = unix_now();
  REQUIRE(c.run({"scancel", "--signal=USR1", std::to_string(id)})->exit_code == 0);
  wait_event(log, "step0", "USR1", 10s);
  std::this_thread::sleep_for(1s);
  print_timeline("scancel --signal=USR1", log, t0);
  events = parse_signal_log(slurp(log));
  CHECK(events_since(events, "step0", t0) == std::vector<std::string>{"USR1"});
  CHECK(events_since(events, "step0.child", t0) == std::vector<std::string>{"USR1"});
  CHECK(events_since(events, "batch", t0).empty());
  CHECK(events_since(events, "batch.child", t0).empty());

  CHECK(c.job(id)->state() == "RUNNING");
}

TEST_CASE(
    "slurm: scontrol requeue signals the job, holds it cred_expire, reruns it with "
    "SLURM_RESTART_COUNT=1",
    "[integration]") {
  SG_SLURM_OR_SKIP();
  auto& c = cluster();
  REQUIRE(c.cancel_all_jobs().ok());
  TempDir tmp;
  const std::string log = tmp / "signals.log";
  const auto id = start_recorders(c, log);

  const double t0 = unix_now();
  REQUIRE(c.run({"scontrol", "requeue", std::to_string(id)})->exit_code == 0);
  const auto pending = wait_state_or_fail(c, id, {"PENDING"}, 30s);
  const double pending_at = unix_now();
  std::cout << "after requeue: JobState=" << pending.state() << " Reason=" << pending.reason()
            << " Restarts=" << pending.restarts() << "\n";
  CHECK(pending.restarts() == 1);
  const auto again = wait_state_or_fail(c, id, {"RUNNING"}, 60s);
  const double rerun = unix_now();
  // The second run's processes say SLURM_RESTART_COUNT=1.
  CHECK(wait_event_after(log, "batch", "start", t0, 20s).info.at("restart") == "1");
  CHECK(wait_event_after(log, "step0", "start", t0, 20s).info.at("restart") == "1");
  print_timeline("scontrol requeue", log, t0);
  std::cout << "requeue -> PENDING " << (pending_at - t0) << " s, RUNNING again: " << (rerun - t0)
            << " s\n";
  // Like scancel: SIGCONT + SIGTERM to every process, SIGKILL after KillWait (no "exit").
  const auto events = parse_signal_log(slurp(log));
  for (const auto& who : kAll) {
    INFO(who);
    std::vector<std::string> first_run;
    for (const auto& e : events)
      if (e.who == who && e.time >= t0 && e.time < pending_at) first_run.push_back(e.event);
    CHECK(std::find(first_run.begin(), first_run.end(), "TERM") != first_run.end());
    CHECK(std::find(first_run.begin(), first_run.end(), "exit") == first_run.end());
  }
  CHECK(again.restarts() == 1);
  CHECK(rerun - t0 >= c.options().cred_expire_s - 1);
}

TEST_CASE("slurm: --signal before the time limit reaches the batch shell (B:) or the steps",
          "[integration]") {
  SG_SLURM_OR_SKIP();
  auto& c = cluster();
  REQUIRE(c.cancel_all_jobs().ok());
  TempDir tmp;
  // Both at once (one CPU each): the signal comes when slurmctld's periodic check finds the
  // job within 50 s of its 1-minute limit, so this takes up to ~40 s.
  const std::string log_b = tmp / "b.log", log_s = tmp / "s.log";
  const double t0 = unix_now();
  const auto id_b =
      submit_or_fail(c, recorder_script({log_b, 1, ""}), {"--time=1", "--signal=B:USR1@50"});
  const auto id_s =
      submit_or_fail(c, recorder_script({log_s, 1, ""}), {"--time=1", "--signal=USR1@50"});
  auto events_b = wait_event(log_b, "batch", "USR1", 60s);
  auto events_s = wait_event(log_s, "step0", "USR1", 60s);
  std::this_thread::sleep_for(1s);
  print_timeline("--signal=B:USR1@50 --time=1 (t=0: submit)", log_b, t0);
  print_timeline("--signal=USR1@50 --time=1 (t=0: submit)", log_s, t0);
  events_b = parse_signal_log(slurp(log_b));
  events_s = parse_signal_log(slurp(log_s));
  const double start_b = first_event(events_b, "batch", "start")->time;
  const double usr1_b = first_event(events_b, "batch", "USR1")->time;
  std::cout << "B:USR1@50 came " << (usr1_b - start_b) << " s after the start\n";
  // slurmctld checks time limits every 30 s: the signal comes 50 s ahead of the limit give
  // or take that period, but always well before it.
  CHECK(usr1_b - start_b < 45);
  // B: only the batch shell (USR1, and a SIGCONT); without B: every process of every step
  // but not the batch shell.
  const std::vector<std::string> usr1_cont = {"CONT", "USR1", "start"};  // sorted
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  CHECK(sorted(events_since(events_b, "batch", t0)) == usr1_cont);
  for (const char* who : {"batch.child", "step0", "step0.child"})
    CHECK(events_since(events_b, who, t0) == std::vector<std::string>{"start"});
  for (const char* who : {"batch", "batch.child"})
    CHECK(events_since(events_s, who, t0) == std::vector<std::string>{"start"});
  for (const char* who : {"step0", "step0.child"})
    CHECK(sorted(events_since(events_s, who, t0)) == usr1_cont);
  CHECK(c.job(id_b)->state() == "RUNNING");
  CHECK(c.job(id_s)->state() == "RUNNING");
}

TEST_CASE("slurm: processes in a process group of their own, under proctrack/pgid and linuxproc",
          "[integration]") {
  SG_SLURM_OR_SKIP();
  // shardguard starts each rank in its own process group: does Slurm still signal and kill
  // it? And an orphan (its parent exited; a daemonized helper)? Real clusters track jobs with
  // cgroups (everything); this fixture cannot, and the two trackers it can use differ.
  const std::string proctrack =
      GENERATE(std::string("proctrack/pgid"), std::string("proctrack/linuxproc"));
  INFO(proctrack);
  SlurmOptions options;
  options.nodes = 1;
  options.proctrack = proctrack;
  auto c = start_cluster(options);
  TempDir tmp;
  const std::string log = tmp / "signals.log", rec = signal_recorder_bin();
  const auto id = submit_or_fail(
      *c,
      "#!/bin/bash\n"
      "srun -n 1 bash -c '\"$0\" step0.pg \"$1\" --own-pgid & exec \"$0\" step0 \"$1\"' '" +
          rec + "' '" + log + "' &\n'" + rec + "' batch.pg '" + log + "' --own-pgid &\n" + "( '" +
          rec + "' batch.orphan '" + log + "' & )\n" + "exec '" + rec + "' batch '" + log + "'\n");
  wait_state_or_fail(*c, id, {"RUNNING"}, 30s);
  const std::vector<std::string> all = {"batch", "batch.pg", "batch.orphan", "step0", "step0.pg"};
  for (const auto& who : all) wait_event(log, who, "start", 20s);

  const double t0 = unix_now();
  REQUIRE(c->run({"scancel", std::to_string(id)})->exit_code == 0);
  auto events = parse_signal_log(slurp(log));
  auto pid_of = [&](const std::string& who) {
    return static_cast<pid_t>(std::stoi(first_event(events, who, "start")->info.at("pid")));
  };
  // KillWait and a margin: whatever Slurm kills is gone by then.
  for (const char* who : {"batch", "step0"}) CHECK(wait_exit(pid_of(who), 15s));
  std::this_thread::sleep_for(1s);
  const auto state = c->job(id);
  events = parse_signal_log(slurp(log));
  std::map<std::string, bool> alive;
  for (const auto& who : all) alive[who] = process_alive(pid_of(who));
  std::cout << "--- scancel, " << proctrack << " (t=0: scancel)\n" << describe_events(events, t0);
  for (const auto& [who, a] : alive)
    std::cout << who << (a ? " still alive" : " gone") << " at +" << (unix_now() - t0) << "s\n";
  std::cout << "JobState=" << (state.ok() ? state->state() : "?") << "\n";
  // Then the escaped ones are killed here; the job can complete.
  for (const auto& [who, a] : alive)
    if (a) ::kill(pid_of(who), SIGKILL);
  wait_state_or_fail(*c, id, {"CANCELLED"}, 30s);

  // The processes in the job's own process groups: signalled and killed in both modes.
  for (const char* who : {"batch", "step0"}) {
    CHECK(first_event(events, who, "TERM"));
    CHECK_FALSE(alive[who]);
  }
  if (proctrack == "proctrack/pgid") {
    // Another process group escapes: never signalled, still running after KillWait, and
    // the job stays COMPLETING while they run.
    for (const char* who : {"batch.pg", "step0.pg"}) {
      CHECK_FALSE(first_event(events, who, "TERM"));
      CHECK(alive[who]);
    }
    CHECK(state->state() == "COMPLETING");
    // The orphan stayed in the job's process group: signalled and killed.
    CHECK(first_event(events, "batch.orphan", "TERM"));
    CHECK_FALSE(alive["batch.orphan"]);
  } else {
    // linuxproc follows parent pids: children in their own group are signalled and killed,
    // an orphan (now a child of init) is not, and outlives the job.
    for (const char* who : {"batch.pg", "step0.pg"}) {
      CHECK(first_event(events, who, "TERM"));
      CHECK_FALSE(alive[who]);
    }
    CHECK_FALSE(first_event(events, "batch.orphan", "TERM"));
    CHECK(alive["batch.orphan"]);
  }
}
