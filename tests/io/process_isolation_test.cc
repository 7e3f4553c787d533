// What survives a SIGKILLed supervisor (issue 11), with sg_tree_helper as the supervisor:
// with a PID namespace nothing; without one the setsid descendants, which the sweep of the
// recorded processes then kills (never a pid reused by another process); a cgroup per
// attempt; and the same as an unprivileged user made by the test (skipped where the machine
// cannot make one).
#include "io/process_isolation.h"

#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <thread>

#include "io/event_loop.h"
#include "io/process.h"
#include "io/process_record.h"
#include "io/process_tree.h"
#include "tests/io/tree_util.h"
#include "tests/support/background.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"

using namespace std::chrono_literals;
using namespace shardguard;
using io::Isolation;
using testing::processes_with;
using testing::TempDir;

namespace {

const std::string kHelper = SG_TREE_HELPER;

// Waits for the helper's "launched <pid> <isolation>" line in its log.
std::string wait_launched(const std::string& log) {
  std::string line;
  testing::eventually(
      [&] {
        std::ifstream in(log);
        while (std::getline(in, line))
          if (line.rfind("launched ", 0) == 0 || line.rfind("error ", 0) == 0) return true;
        return false;
      },
      10000ms);
  return line;
}

// Processes with `token` but `helper` itself (its command line holds the token too).
std::vector<pid_t> leftovers(const std::string& token, pid_t helper) {
  auto out = processes_with(token);
  std::erase(out, helper);
  return out;
}

bool all_gone(const std::string& token, pid_t helper) {
  (void)io::reap_orphans();  // the dead re-parented to this subreaper
  return leftovers(token, helper).empty();
}

// Runs the helper as `helper_argv` (prefixed by `as_user`) until it is SIGKILLed; returns
// the isolation it reported and whether nothing of the tree survived, then sweeps with
// `sweep` (argv prefix) when something did.
struct KillResult {
  std::string isolation;
  size_t survivors = 0;
  bool clean_after_sweep = false;
  std::string sweep_output;
};

KillResult kill_supervisor(const std::vector<std::string>& as_user, const std::string& isolation,
                           const TempDir& dir) {
  KillResult out;
  const std::string token = testing::unique_token(), ready = dir / ("ready" + token);
  const std::string record = dir / ("record" + token), log = dir / ("log" + token);
  std::vector<std::string> argv = as_user;
  for (std::string a :
       {kHelper, std::string("hold"), isolation, record, testing::escaping_rank(token, ready)})
    argv.push_back(a);
  testing::Background helper(argv, log);
  REQUIRE(helper.pid() > 0);
  const std::string launched = wait_launched(log);
  INFO(launched);
  REQUIRE(launched.rfind("launched ", 0) == 0);
  out.isolation = launched.substr(launched.rfind(' ') + 1);
  REQUIRE(testing::wait_for_file(ready, 10s));
  REQUIRE(testing::eventually([&] { return testing::sleepers(token).size() == 4; }, 5000ms));

  helper.signal(SIGKILL);  // the OOM killer, an operator's kill -9
  REQUIRE(helper.wait(10s).has_value());
  // Give the kernel (PDEATHSIG, the namespace's end) its moment.
  testing::eventually([&] { return all_gone(token, helper.pid()); }, 3000ms);
  out.survivors = leftovers(token, helper.pid()).size();
  if (out.survivors > 0) {
    std::string cmd;
    for (const auto& a : as_user) cmd += a + " ";
    auto swept = testing::run_command(cmd + kHelper + " sweep " + record);
    out.sweep_output = swept.out + swept.err;
    out.clean_after_sweep =
        testing::eventually([&] { return all_gone(token, helper.pid()); }, 5000ms);
  }
  return out;
}

// A user made for one test and removed after it.
class TemporaryUser {
 public:
  TemporaryUser() {
    name_ = "sgt" + std::to_string(::getpid() % 1000000);
    const auto r = testing::run_command(
        "useradd --system --no-create-home --shell /usr/sbin/nologin " + name_);
    if (r.exit_code != 0) {
      why_ = "useradd failed: " + r.err;
      return;
    }
    if (const passwd* pw = ::getpwnam(name_.c_str())) {
      uid_ = pw->pw_uid;
      gid_ = pw->pw_gid;
    }
  }
  ~TemporaryUser() {
    if (why_.empty()) (void)testing::run_command("userdel " + name_);
  }
  bool ok() const { return why_.empty() && uid_ != 0; }
  const std::string& why() const { return why_; }
  uid_t uid() const { return uid_; }
  gid_t gid() const { return gid_; }
  std::vector<std::string> runner() const {
    return {"/usr/bin/setpriv",
            "--reuid=" + std::to_string(uid_),
            "--regid=" + std::to_string(gid_),
            "--clear-groups",
            "--inh-caps=-all",
            "--"};
  }

 private:
  std::string name_, why_;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

// An unprivileged user for this test, or nullptr (with a warning saying why) where this machine
// cannot make one: the test is then skipped.
std::unique_ptr<TemporaryUser> make_user_or_skip() {
  if (::geteuid() != 0 || ::access("/usr/sbin/useradd", X_OK) != 0 ||
      ::access("/usr/bin/setpriv", X_OK) != 0) {
    WARN("skipped: needs root, useradd and setpriv to make an unprivileged user");
    return nullptr;
  }
  auto user = std::make_unique<TemporaryUser>();
  if (!user->ok()) {
    WARN("skipped: " << user->why());
    return nullptr;
  }
  return user;
}

// 'a'\''b': one shell word whatever `s` holds.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string run_as(const TemporaryUser& user, const std::vector<std::string>& args) {
  std::string cmd;
  for (const auto& a : user.runner()) cmd += a + " ";
  cmd += kHelper;
  for (const auto& a : args) cmd += " " + quoted(a);
  const auto r = testing::run_command(cmd);
  return r.out + r.err;
}

}  // namespace

TEST_CASE("isolation: what this machine offers", "[integration]") {
  const auto support = io::probe_isolation();
  WARN("this machine: " << support.describe());
  CHECK_THAT(support.describe(), Catch::StartsWith("PID namespaces: "));
  if (::geteuid() == 0) CHECK(support.pid_namespace);
  if (!support.cgroup.mount.empty()) CHECK_FALSE(support.cgroup.own.empty());
}

TEST_CASE("isolation: a SIGKILLed supervisor takes its PID namespace with it", "[integration]") {
  REQUIRE(io::become_child_subreaper().ok());
  if (!io::probe_isolation().pid_namespace) {
    WARN("skipped: this machine permits no PID namespace");
    return;
  }
  TempDir dir;
  const auto r = kill_supervisor({}, "pidns", dir);
  CHECK(r.isolation == "pidns");
  CHECK(r.survivors == 0);
}

TEST_CASE("isolation: without a namespace the sweep kills what a SIGKILLed supervisor left",
          "[integration]") {
  REQUIRE(io::become_child_subreaper().ok());
  TempDir dir;
  const auto r = kill_supervisor({}, "none", dir);
  CHECK(r.isolation == "none");
  // PDEATHSIG took the rank only: its background sleeper and the setsid pair lived on.
  CHECK(r.survivors == 3);
  INFO(r.sweep_output);
  CHECK_THAT(r.sweep_output, Catch::StartsWith("killed 3 "));
  CHECK(r.clean_after_sweep);
}

// A launcher prefix no running process has: the record of a run that is over.
constexpr const char* kFinishedLauncher = "999999999.1.";

void append_line(const std::string& path, const std::string& line) {
  std::ofstream(path, std::ios::app) << line << "\n";
}

// Until `pid` runs with a tree marker (env has exec'd its program).
bool marked_now(pid_t pid) {
  return testing::eventually(
      [&] { return io::environ_value(pid, io::kTreeMarkerVariable).has_value(); }, 5000ms);
}

// `argv` run with the tree marker `marker` in its environment, as a launched rank has it.
std::vector<std::string> marked(const std::string& marker, std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"/usr/bin/env", std::string(io::kTreeMarkerVariable) + "=" + marker});
  return argv;
}

TEST_CASE("isolation: the sweep never kills a pid that another process reuses", "[integration]") {
  TempDir dir;
  const std::string token = testing::unique_token(), record = dir / "record";
  testing::Background other(marked(std::string(kFinishedLauncher) + "1", {"/bin/sleep", token}),
                            dir / "log");
  REQUIRE(testing::eventually([&] { return processes_with(token).size() == 1; }, 5000ms));
  REQUIRE(marked_now(other.pid()));
  const auto start = io::process_start_time(other.pid());
  REQUIRE(start);
  // The record names this pid with another start time: a process that died, its pid reused.
  REQUIRE(io::record_processes(record, {{other.pid(), *start + 1}}).ok());
  auto swept = io::sweep_recorded(record, 5s);
  REQUIRE(swept.ok());
  CHECK(swept->reused == 1);
  CHECK(swept->killed == 0);
  CHECK(processes_with(token).size() == 1);
  CHECK_FALSE(std::filesystem::exists(record));  // swept records are removed
  // With the true start time and the marker of a finished run it is a leftover: killed.
  append_line(record, std::string("launcher ") + kFinishedLauncher);
  REQUIRE(io::record_processes(record, {{other.pid(), *start}}).ok());
  swept = io::sweep_recorded(record, 5s);
  REQUIRE(swept.ok());
  CHECK(swept->killed == 1);
  CHECK(testing::eventually([&] { return processes_with(token).empty(); }, 5000ms));
  // No record: nothing to do.
  swept = io::sweep_recorded(dir / "none", 5s);
  REQUIRE(swept.ok());
  CHECK(swept->killed + swept->reused + swept->gone + swept->refused == 0);
}

// N5: `<run dir>/processes` may be writable by others, and pids and start times are public.
TEST_CASE("isolation: the sweep refuses what the record names but no finished run left",
          "[integration]") {
  TempDir dir;
  const std::string record = dir / "record";
  SECTION("a process without a marker, a live launcher's rank") {
    const std::string plain = testing::unique_token(), live = testing::unique_token();
    testing::Background unmarked({"/bin/sleep", plain}, dir / "log");
    // A rank of a live job: its launcher (this test process) is running.
    const std::string own_prefix = std::to_string(::getpid()) + "." +
                                   std::to_string(io::process_start_time(::getpid()).value()) + ".";
    testing::Background rank(marked(own_prefix + "7", {"/bin/sleep", live}), dir / "log");
    REQUIRE(testing::eventually(
        [&] { return processes_with(plain).size() == 1 && processes_with(live).size() == 1; },
        5000ms));
    REQUIRE(marked_now(rank.pid()));
    append_line(record, "launcher " + own_prefix);
    append_line(record, std::string("launcher ") + kFinishedLauncher);
    append_line(record, "launcher garbage.");
    REQUIRE(io::record_processes(record, {{unmarked.pid(), *io::process_start_time(unmarked.pid())},
                                          {rank.pid(), *io::process_start_time(rank.pid())}})
                .ok());
    auto swept = io::sweep_recorded(record, 5s);
    REQUIRE(swept.ok());
    CHECK(swept->killed == 0);
    CHECK(swept->refused == 2);
    std::this_thread::sleep_for(200ms);
    CHECK(processes_with(plain).size() == 1);
    CHECK(processes_with(live).size() == 1);
  }
  SECTION("as root: another user's process with a finished run's marker") {
    auto made = make_user_or_skip();
    if (!made) return;
    TemporaryUser& user = *made;
    const std::string token = testing::unique_token();
    auto argv = user.runner();
    for (auto& a : marked(std::string(kFinishedLauncher) + "3", {"/bin/sleep", token}))
      argv.push_back(a);
    testing::Background theirs(argv, dir / "log");
    pid_t pid = 0;
    REQUIRE(testing::eventually(
        [&] {
          const auto found = processes_with(token);
          if (found.size() != 1) return false;
          pid = found.front();
          return true;
        },
        5000ms));
    REQUIRE(marked_now(pid));
    append_line(record, std::string("launcher ") + kFinishedLauncher);
    REQUIRE(io::record_processes(record, {{pid, *io::process_start_time(pid)}}).ok());
    auto swept = io::sweep_recorded(record, 5s);
    REQUIRE(swept.ok());
    CHECK(swept->killed == 0);
    CHECK(swept->refused == 1);
    std::this_thread::sleep_for(200ms);
    CHECK(processes_with(token).size() == 1);
    ::kill(pid, SIGKILL);
  }
}

TEST_CASE("isolation: a cgroup per attempt holds the whole tree", "[integration]") {
  const auto cg = io::probe_cgroup_v2();
  if (!cg.writable) {
    WARN("skipped: no writable cgroup v2 here (" << cg.why << ")");
    return;
  }
  REQUIRE(io::become_child_subreaper().ok());
  io::EventLoop loop;
  io::PosixProcessLauncher launcher(loop);
  TempDir dir;
  const std::string prefix = "sg-test-" + std::to_string(::getpid()) + "-";
  auto attempt = io::Cgroup::create(cg.own, prefix + "attempt-1");
  REQUIRE(attempt.ok());
  const std::string token = testing::unique_token(), ready = dir / "ready";
  io::ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", testing::escaping_rank(token, ready)};
  spec.cgroup = attempt->path();
  auto child = launcher.launch(spec);
  REQUIRE(child.ok());
  REQUIRE(testing::wait_for_file(ready, 10s));
  REQUIRE(testing::eventually([&] { return testing::sleepers(token).size() == 4; }, 5000ms));
  auto in_cgroup = attempt->procs();
  for (pid_t p : processes_with(token))
    CHECK(std::find(in_cgroup.begin(), in_cgroup.end(), p) != in_cgroup.end());

  SECTION("teardown kills through the cgroup") {
    REQUIRE(io::kill_tree_and_wait((*child)->pgid(), {}, child->get()).ok());
    CHECK(processes_with(token).empty());
    CHECK(attempt->procs().empty());
    REQUIRE(attempt->kill_and_remove(5s).ok());
  }
  SECTION("a later start sweeps the cgroups of a dead supervisor") {
    auto swept = io::sweep_cgroups(cg.own, prefix, 5s);
    REQUIRE(swept.ok());
    CHECK(*swept == 1);
    CHECK(testing::eventually([&] { return processes_with(token).empty(); }, 5000ms));
  }
  CHECK_FALSE(std::filesystem::exists(attempt->path()));
  CHECK_FALSE(io::Cgroup::create(cg.own, "../escape").ok());
}

TEST_CASE("isolation: as an unprivileged user", "[integration]") {
  auto made = make_user_or_skip();
  if (!made) return;
  TemporaryUser& user = *made;
  REQUIRE(io::become_child_subreaper().ok());
  TempDir dir;
  REQUIRE(::chown(dir.path().c_str(), user.uid(), user.gid()) == 0);
  const std::string probe = run_as(user, {"probe"});
  WARN("as " << user.uid() << ": " << probe);
  const bool userns = probe.find("PID namespaces: yes (user namespace)") != std::string::npos;

  SECTION("teardown without a namespace: the /proc walk") {
    const std::string token = testing::unique_token(), ready = dir / "ready";
    const auto out =
        run_as(user, {"teardown", "none", token, ready, testing::escaping_rank(token, ready)});
    CHECK_THAT(out, Catch::StartsWith("isolation none left 0 outside "));
    CHECK(processes_with(token).empty());
  }
  SECTION("teardown with kAuto: a user namespace where the kernel allows one") {
    const std::string token = testing::unique_token(), ready = dir / "ready";
    const auto out =
        run_as(user, {"teardown", "auto", token, ready, testing::escaping_rank(token, ready)});
    CHECK_THAT(out, Catch::StartsWith(userns ? "isolation pidns left 0" : "isolation none left 0"));
    CHECK(processes_with(token).empty());
  }
  SECTION("exit statuses through the user namespace's init") {
    if (!userns) return;
    CHECK(run_as(user, {"status", "pidns", "exit 3"}) == "pidns exited with code 3\n");
    CHECK(run_as(user, {"status", "pidns", "kill -SEGV $$"}) ==
          "pidns killed by signal 11 (SIGSEGV)\n");
  }
  SECTION("a SIGKILLed supervisor: its namespace, or the sweep") {
    const auto r = kill_supervisor(user.runner(), userns ? "auto" : "none", dir);
    if (userns) {
      CHECK(r.isolation == "pidns");
      CHECK(r.survivors == 0);
    } else {
      CHECK(r.survivors == 3);
      CHECK(r.clean_after_sweep);
    }
    // And the fallback as this user, whatever the kernel allows.
    const auto none = kill_supervisor(user.runner(), "none", dir);
    CHECK(none.survivors == 3);
    INFO(none.sweep_output);
    CHECK(none.clean_after_sweep);
  }
}
