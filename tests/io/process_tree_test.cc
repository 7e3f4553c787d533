// Process-tree teardown with real processes (issue 11): a rank that escapes its process
// group (setsid, double fork) leaves nothing behind; exit statuses through a PID
// namespace's init read exactly as without one; peer pids are checked against a tree;
// running out of descriptors at launch is a transient error.
#include "io/process_tree.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <thread>

#include "io/event_loop.h"
#include "io/process.h"
#include "tests/io/tree_util.h"
#include "tests/support/background.h"
#include "tests/support/temp_dir.h"

using namespace std::chrono_literals;
using namespace shardguard;
using io::ExitStatus;
using io::Isolation;
using testing::processes_with;
using testing::TempDir;

namespace {

io::ProcessSpec sh(const std::string& script, Isolation isolate = Isolation::kNone) {
  io::ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.isolate = isolate;
  return spec;
}

bool in_proc(pid_t pid) { return std::filesystem::exists("/proc/" + std::to_string(pid)); }

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

TEST_CASE("process tree: teardown leaves nothing of a rank that escapes its process group",
          "[integration]") {
  REQUIRE(io::become_child_subreaper().ok());  // as `shardguard run` is
  const Isolation isolate = GENERATE(Isolation::kNone, Isolation::kPidNamespace);
  const bool ignores_term = GENERATE(false, true);
  CAPTURE(testing::isolation_name(isolate), ignores_term);
  io::EventLoop loop;
  io::PosixProcessLauncher launcher(loop);
  TempDir dir;
  const std::string token = testing::unique_token(), ready = dir / "ready";
  std::string script = testing::escaping_rank(token, ready);
  if (ignores_term) script = "trap '' TERM; " + script;  // SIG_IGN is inherited by the sleeps
  auto child = launcher.launch(sh(script, isolate));
  REQUIRE(child.ok());
  CHECK((*child)->isolation() == isolate);
  REQUIRE(testing::wait_for_file(ready, 10s));
  REQUIRE(testing::eventually([&] { return testing::sleepers(token).size() == 4; }, 5000ms));
  const auto before = testing::sleepers(token);
  size_t outside = 0;
  std::string seen;
  for (pid_t p : before) {
    const pid_t pgid = ::getpgid(p);
    outside += pgid != (*child)->pgid();
    seen += std::to_string(p) + " in group " + std::to_string(pgid) + "; ";
  }
  INFO("rank " << (*child)->pid() << ": " << seen);
  CHECK(outside == 2);  // the setsid pair: signalling the group alone would miss them

  io::KillTreeOptions options;
  options.grace = ignores_term ? 200ms : 5s;
  std::optional<Result<io::KillTreeReport>> report;
  SECTION("blocking") { report = io::kill_tree_and_wait((*child)->pgid(), options, child->get()); }
  SECTION("on the loop") {
    io::async_kill_tree(loop, (*child)->pgid(), options, child->get(),
                        [&](Result<io::KillTreeReport> r) { report = std::move(r); });
    REQUIRE(loop.run_until([&] { return report.has_value(); }, 20s));
  }
  REQUIRE(report->ok());
  CHECK(report->value().sent_sigkill == ignores_term);
  // (In a namespace the kernel may kill the setsid pair first, once the rank has died.)
  if (isolate == Isolation::kNone) CHECK(report->value().outside_group >= 2);
  CHECK(processes_with(token).empty());
  for (pid_t p : before) CHECK_FALSE(in_proc(p));  // gone and reaped, not zombies
  auto status = (*child)->try_wait();
  REQUIRE(status.ok());
  REQUIRE(status->has_value());
  CHECK(**status == ExitStatus::killed(ignores_term ? SIGKILL : SIGTERM));
}

TEST_CASE("process tree: signalling the group alone lets the setsid pair escape", "[integration]") {
  // What teardown did before issue 11, kept as the proof that the test above can fail.
  REQUIRE(io::become_child_subreaper().ok());
  io::EventLoop loop;
  io::PosixProcessLauncher launcher(loop);
  TempDir dir;
  const std::string token = testing::unique_token(), ready = dir / "ready";
  auto child = launcher.launch(sh(testing::escaping_rank(token, ready)));
  REQUIRE(child.ok());
  REQUIRE(testing::wait_for_file(ready, 10s));
  REQUIRE(testing::eventually([&] { return testing::sleepers(token).size() == 4; }, 5000ms));
  ::kill(-(*child)->pgid(), SIGKILL);
  REQUIRE((*child)->wait_blocking(5s).ok());
  std::this_thread::sleep_for(100ms);
  CHECK(processes_with(token).size() == 2);
  // The tree is still known after the leader was reaped: teardown by pgid finds them.
  auto report = io::kill_tree_and_wait((*child)->pgid(), {}, nullptr);
  INFO((report.ok() ? "" : report.error().message()));
  REQUIRE(report.ok());
  CHECK(processes_with(token).empty());
  CHECK(io::reap_orphans() == 0);  // teardown reaped them already
}

TEST_CASE("process tree: exit statuses through a PID namespace read as without one",
          "[integration]") {
  io::EventLoop loop;
  io::PosixProcessLauncher launcher(loop);
  struct Row {
    const char* script;
    ExitStatus expected;
    const char* text;
  };
  const auto row = GENERATE(values<Row>({
      {"exit 0", ExitStatus::exited(0), "exited with code 0"},
      {"exit 3", ExitStatus::exited(3), "exited with code 3"},
      {"kill -KILL $$", ExitStatus::killed(SIGKILL), "killed by signal 9 (SIGKILL)"},
      {"kill -SEGV $$", ExitStatus::killed(SIGSEGV), "killed by signal 11 (SIGSEGV)"},
      {"kill -TERM $$", ExitStatus::killed(SIGTERM), "killed by signal 15 (SIGTERM)"},
  }));
  CAPTURE(row.script);
  std::string described[2];
  for (int i = 0; i < 2; ++i) {
    const Isolation isolate = i == 0 ? Isolation::kNone : Isolation::kPidNamespace;
    auto child = launcher.launch(sh(row.script, isolate));
    REQUIRE(child.ok());
    REQUIRE((*child)->isolation() == isolate);
    auto status = (*child)->wait_blocking(10s);
    REQUIRE(status.ok());
    CHECK(*status == row.expected);
    described[i] = status->describe();
    // Reported on the loop too.
    auto again = launcher.launch(sh(row.script, isolate));
    REQUIRE(again.ok());
    std::optional<Result<ExitStatus>> async;
    (*again)->async_wait([&](Result<ExitStatus> s) { async = std::move(s); });
    REQUIRE(loop.run_until([&] { return async.has_value(); }, 10s));
    REQUIRE(async->ok());
    CHECK(async->value() == row.expected);
  }
  CHECK(described[0] == row.text);
  CHECK(described[1] == described[0]);
}

TEST_CASE("process tree: inside its PID namespace a rank is pid 2 with its own /proc",
          "[integration]") {
  io::EventLoop loop;
  io::PosixProcessLauncher launcher(loop);
  TempDir dir;
  const std::string token = testing::unique_token();
  const std::string inside = dir / "inside", procs = dir / "procs";
  auto child = launcher.launch(sh(
      "echo $$ > " + inside + "; ls /proc | grep -c '^[0-9]' > " + procs + "; exec sleep " + token,
      Isolation::kPidNamespace));
  REQUIRE(child.ok());
  REQUIRE(testing::wait_for_file(procs, 10s));
  CHECK(first_line(inside) == "2");
  CHECK(std::stoi(first_line(procs)) <= 4);  // init, the shell, ls, grep: not the host's
  // pid() is the host pid of the program itself (what SO_PEERCRED reports).
  const pid_t pid = (*child)->pid();
  auto tree = (*child)->tree();
  REQUIRE(tree);
  const pid_t init = tree->identity().init;
  REQUIRE(testing::eventually([&] { return processes_with(token) == std::vector{pid}; }, 5000ms));
  auto info = io::read_proc_info(pid);
  REQUIRE(info.ok());
  CHECK(info->ppid == init);
  CHECK(info->pgid == pid);
  CHECK(io::is_descendant_of(pid, ::getpid()));
  CHECK(tree->contains(pid));
  CHECK(tree->contains(init));
  CHECK_FALSE(tree->contains(::getpid()));

  SECTION("a signal to the program") {
    REQUIRE((*child)->signal(SIGTERM).ok());
    auto status = (*child)->wait_blocking(10s);
    REQUIRE(status.ok());
    CHECK(*status == ExitStatus::killed(SIGTERM));
  }
  SECTION("a signal to the init is forwarded to the program") {
    REQUIRE(::kill(init, SIGUSR1) == 0);
    auto status = (*child)->wait_blocking(10s);
    REQUIRE(status.ok());
    CHECK(*status == ExitStatus::killed(SIGUSR1));
  }
  SECTION("killing the init takes the namespace with it") {
    REQUIRE(::kill(init, SIGKILL) == 0);
    auto status = (*child)->wait_blocking(10s);
    REQUIRE(status.ok());
    CHECK(*status == ExitStatus::killed(SIGKILL));  // the init's end stands for the program's
    CHECK(processes_with(token).empty());
  }
  CHECK_FALSE(in_proc(init));
}

TEST_CASE("process tree: a peer pid is checked against the launched tree", "[integration]") {
  REQUIRE(io::become_child_subreaper().ok());
  io::EventLoop loop;
  io::PosixProcessLauncher launcher(loop);
  TempDir dir;
  const std::string token = testing::unique_token(), ready = dir / "ready";
  const Isolation isolate = GENERATE(Isolation::kNone, Isolation::kPidNamespace);
  CAPTURE(testing::isolation_name(isolate));
  auto child = launcher.launch(sh(testing::escaping_rank(token, ready), isolate));
  auto other = launcher.launch(sh("exec sleep " + testing::unique_token()));
  REQUIRE(child.ok());
  REQUIRE(other.ok());
  REQUIRE(testing::wait_for_file(ready, 10s));
  REQUIRE(testing::eventually([&] { return testing::sleepers(token).size() == 4; }, 5000ms));
  auto tree = (*child)->tree();
  REQUIRE(tree);
  for (pid_t p : processes_with(token)) {
    CAPTURE(p);
    CHECK(tree->contains(p));  // the orphaned setsid pair too (marker, or the namespace)
  }
  CHECK_FALSE(tree->contains((*other)->pid()));
  CHECK_FALSE(tree->contains(::getpid()));
  const auto pids = io::pids_of_tree((*child)->pid());
  CHECK(pids.front() == (*child)->pid());
  CHECK(pids.size() == 2);  // the rank and its plain background sleeper
  CHECK(io::is_descendant_of(pids[1], (*child)->pid()));
  CHECK_FALSE(io::is_descendant_of((*child)->pid(), pids[1]));
  CHECK_FALSE(io::is_descendant_of((*child)->pid(), (*child)->pid()));
  REQUIRE(io::kill_tree_and_wait((*child)->pgid(), {}, child->get()).ok());
  CHECK(processes_with(token).empty());
}

TEST_CASE("process tree: out of descriptors at launch is a transient error", "[integration]") {
  io::EventLoop loop;
  io::PosixProcessLauncher launcher(loop);
  const Isolation isolate = GENERATE(Isolation::kNone, Isolation::kPidNamespace);
  const int spare = GENERATE(0, 1, 2);  // fails at open /dev/null, pipe, pipe or socketpair
  CAPTURE(testing::isolation_name(isolate), spare);
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  rlimit low = saved;
  low.rlim_cur = 512;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  std::vector<int> filler;
  for (int fd; (fd = ::dup(0)) >= 0;) filler.push_back(fd);
  for (int i = 0; i < spare; ++i) {
    ::close(filler.back());
    filler.pop_back();
  }
  auto starved = launcher.launch(sh("exit 0", isolate));
  for (int fd : filler) ::close(fd);
  ::setrlimit(RLIMIT_NOFILE, &saved);

  REQUIRE_FALSE(starved.ok());
  CHECK_THAT(starved.error().message(),
             Catch::StartsWith("launch '/bin/sh'") && Catch::EndsWith("Too many open files"));
  CHECK(io::is_transient_launch_error(starved.error()));
  // Once descriptors are free again the same launch works; a missing program never will.
  auto later = launcher.launch(sh("exit 0", isolate));
  REQUIRE(later.ok());
  CHECK((*later)->wait_blocking(10s).ok());
  io::ProcessSpec missing;
  missing.argv = {"/no/such/program"};
  auto never = launcher.launch(missing);
  REQUIRE_FALSE(never.ok());
  CHECK_FALSE(io::is_transient_launch_error(never.error()));
}
