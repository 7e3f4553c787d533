// The directory lease between real processes (tools/lease_holder_main.cc): the second is
// refused with a message naming the first; SIGKILL of the first frees the directory at
// once; without flock a stopped (stale) holder is taken over and a live one is not; a holder
// that wakes up after a take-over learns it lost the lease.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/background.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"

namespace {

using namespace std::chrono_literals;
using shardguard::testing::Background;
using shardguard::testing::eventually;
using shardguard::testing::run_command;
using shardguard::testing::slurp;
using shardguard::testing::TempDir;

const std::string kHolder = SG_LEASE_HOLDER;

std::string hostname() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

// Starts a holder and waits (bounded) until it says it holds the lease.
std::unique_ptr<Background> start_holder(const std::string& dir, const std::string& job,
                                         const std::string& log,
                                         std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {kHolder, dir, job, "--renew-ms", "100"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto p = std::make_unique<Background>(argv, log);
  REQUIRE(p->pid() > 0);
  REQUIRE(eventually([&] { return slurp(log).find("acquired pid=") != std::string::npos; }, 10s));
  return p;
}

shardguard::testing::CommandResult try_take(const std::string& dir, const std::string& job,
                                            const std::string& extra = "") {
  return run_command(kHolder + " " + dir + " " + job + " --try " + extra);
}

TEST_CASE("A second process is refused naming the first; SIGKILL frees the directory",
          "[lease][integration]") {
  TempDir dir, logs;
  auto a = start_holder(dir.path(), "job-a", logs / "a.log");
  CHECK_THAT(slurp(logs / "a.log"), Catch::Contains("flock=1"));

  auto b = try_take(dir.path(), "job-b");
  CHECK(b.exit_code == 3);
  CHECK_THAT(b.out, Catch::Contains("refused: checkpoint directory '" + dir.path() + "'"));
  CHECK_THAT(b.out, Catch::Contains("job 'job-a'"));
  CHECK_THAT(b.out, Catch::Contains("pid " + std::to_string(a->pid())));
  CHECK_THAT(b.out, Catch::Contains("host " + hostname()));
  CHECK_THAT(b.out, Catch::Contains("last renewed"));
  // The same job id started twice is refused just the same (split brain of one job).
  CHECK(try_take(dir.path(), "job-a").exit_code == 3);

  a->signal(SIGKILL);
  REQUIRE(a->wait(5s).has_value());
  // No waiting for staleness: the dead holder's flock is gone with it.
  auto c = try_take(dir.path(), "job-b");
  CHECK(c.exit_code == 0);
  CHECK_THAT(c.out, Catch::Contains("took over from job 'job-a'"));
}

// Stops a holder right after one of its renewals (see --pause-on) and waits until it has.
void pause_holder(const std::string& pause_file, const std::string& log) {
  shardguard::testing::spit(pause_file, "");
  REQUIRE(eventually([&] { return slurp(log).find("pausing") != std::string::npos; }, 10s));
}

TEST_CASE("Without flock a stale holder is taken over and a live one is not",
          "[lease][integration]") {
  TempDir dir, logs;
  const std::string opts = "--no-flock --stale-ms 1500";
  auto a = start_holder(dir.path(), "job-a", logs / "a.log",
                        {"--no-flock", "--stale-ms", "1500", "--pause-on", logs / "pause-a"});
  CHECK_THAT(slurp(logs / "a.log"), Catch::Contains("flock=0"));
  CHECK_THAT(slurp(logs / "a.log"), Catch::Contains("renewed timestamps alone"));

  // Renewing every 100 ms: live, however many times we ask.
  for (int i = 0; i < 5; ++i) {
    auto b = try_take(dir.path(), "job-b", opts);
    REQUIRE(b.exit_code == 3);
    CHECK_THAT(b.out, Catch::Contains("pid " + std::to_string(a->pid())));
    std::this_thread::sleep_for(200ms);
  }

  // Stopped: its renewals stop, the lease goes stale, the next job takes it.
  pause_holder(logs / "pause-a", logs / "a.log");
  shardguard::testing::CommandResult taken;
  REQUIRE(eventually([&] { return (taken = try_take(dir.path(), "job-b", opts)).exit_code == 0; },
                     10s));
  CHECK_THAT(taken.out, Catch::Contains("took over from job 'job-a'"));

  // Hold it for job-b in the background, then wake job-a: it must learn it lost.
  auto b = start_holder(dir.path(), "job-b", logs / "b.log", {"--no-flock", "--stale-ms", "1500"});
  a->signal(SIGCONT);
  auto code = a->wait(10s);
  REQUIRE(code.has_value());
  CHECK(*code == 4);
  CHECK_THAT(slurp(logs / "a.log"), Catch::Contains("lost: lease of checkpoint directory"));
  CHECK_THAT(slurp(logs / "a.log"), Catch::Contains("job 'job-b'"));
  CHECK(try_take(dir.path(), "job-c", opts).exit_code == 3);  // job-b is live
}

TEST_CASE("A stopped holder with a live flock is never stale on one node; a coordinator's is",
          "[lease][integration]") {
  TempDir dir, logs;
  auto a = start_holder(dir.path(), "job-a", logs / "a.log",
                        {"--stale-ms", "300", "--pause-on", logs / "pause-a"});
  pause_holder(logs / "pause-a", logs / "a.log");
  std::this_thread::sleep_for(600ms);  // twice the staleness: its renewals have stopped

  auto refused = try_take(dir.path(), "job-b", "--stale-ms 300");
  CHECK(refused.exit_code == 3);
  CHECK_THAT(refused.out, Catch::Contains("never taken over"));

  auto taken = try_take(dir.path(), "job-b", "--stale-ms 300 --coordinator");
  CHECK(taken.exit_code == 0);
  CHECK_THAT(taken.out, Catch::Contains("flock=0"));  // a's lock lingers; b does without

  a->signal(SIGCONT);
  // b released at once (--try), so a finds its record gone and stops.
  auto code = a->wait(10s);
  REQUIRE(code.has_value());
  CHECK(*code == 4);
  CHECK_THAT(slurp(logs / "a.log"), Catch::Contains("lost:"));
}

}  // namespace
