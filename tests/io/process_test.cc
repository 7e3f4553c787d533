// PosixProcessLauncher and process-group teardown with real processes.
#include "io/process.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "io/event_loop.h"

using namespace std::chrono_literals;
using shardguard::ErrorCode;
using shardguard::Result;
using shardguard::io::ChildProcess;
using shardguard::io::EventLoop;
using shardguard::io::ExitStatus;
using shardguard::io::KillTreeOptions;
using shardguard::io::KillTreeReport;
using shardguard::io::PosixProcessLauncher;
using shardguard::io::ProcessSpec;
namespace fs = std::filesystem;

namespace {

// A fresh directory under the build's temp area, removed at the end of the test.
struct TempDir {
  TempDir() {
    path = fs::temp_directory_path() /
           ("sg-io-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  fs::path path;
  static inline int counter = 0;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Polls for a file with content written by a real child; there is no clock to fake here.
std::string wait_for_content(const std::string& path, std::chrono::milliseconds timeout = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::string content = read_all(path);
    if (!content.empty() && content.back() == '\n') return content;
    std::this_thread::sleep_for(2ms);
  }
  return {};
}

bool proc_exists(pid_t pid) { return fs::exists("/proc/" + std::to_string(pid)); }

// (Designated initializers would trip GCC 12's -Wmissing-field-initializers.)
ProcessSpec spec_of(std::vector<std::string> argv) {
  ProcessSpec spec;
  spec.argv = std::move(argv);
  return spec;
}
ProcessSpec sh(const std::string& script) { return spec_of({"sh", "-c", script}); }

}  // namespace

TEST_CASE("kill_tree_and_wait leaves no grandchild behind", "[integration]") {
  REQUIRE(shardguard::io::become_child_subreaper().ok());
  EventLoop loop;
  PosixProcessLauncher launcher(loop);
  TempDir dir;
  const std::string pid_file = dir.file("grandchild.pid");
  auto child = launcher.launch(sh("sleep 100 & echo $! > " + pid_file + "; wait"));
  REQUIRE(child.ok());
  CHECK((*child)->pgid() == (*child)->pid());
  CHECK(::getpgid((*child)->pid()) == (*child)->pid());

  const std::string content = wait_for_content(pid_file);
  REQUIRE_FALSE(content.empty());
  const pid_t grandchild = std::stoi(content);
  REQUIRE(proc_exists(grandchild));
  CHECK(::getpgid(grandchild) == (*child)->pgid());

  KillTreeOptions options;
  options.grace = 2s;
  auto report = shardguard::io::kill_tree_and_wait((*child)->pgid(), options, child->get());
  REQUIRE(report.ok());
  CHECK_FALSE(report->sent_sigkill);
  CHECK(report->took < 2s);
  CHECK_FALSE(proc_exists(grandchild));
  CHECK_FALSE(proc_exists((*child)->pid()));
  auto status = (*child)->try_wait();
  REQUIRE(status.ok());
  REQUIRE(status->has_value());
  CHECK(**status == ExitStatus::killed(SIGTERM));
}

TEST_CASE("kill_tree escalates to SIGKILL when SIGTERM is ignored", "[integration]") {
  REQUIRE(shardguard::io::become_child_subreaper().ok());  // the sleeps are grandchildren
  EventLoop loop;
  PosixProcessLauncher launcher(loop);
  TempDir dir;
  const std::string ready = dir.file("ready");
  // The ignored SIGTERM is inherited by the sleeps too.
  auto child =
      launcher.launch(sh("trap '' TERM; echo ready > " + ready + "; while :; do sleep 0.05; done"));
  REQUIRE(child.ok());
  REQUIRE_FALSE(wait_for_content(ready).empty());

  KillTreeOptions options;
  options.grace = 100ms;

  SECTION("blocking") {
    auto report = shardguard::io::kill_tree_and_wait((*child)->pgid(), options, child->get());
    REQUIRE(report.ok());
    CHECK(report->sent_sigkill);
    CHECK(report->took >= 100ms);
  }
  SECTION("on the loop") {
    std::optional<Result<KillTreeReport>> report;
    shardguard::io::async_kill_tree(loop, (*child)->pgid(), options, child->get(),
                                    [&](Result<KillTreeReport> r) { report = std::move(r); });
    REQUIRE(loop.run_until([&] { return report.has_value(); }, 5s));
    REQUIRE(report->ok());
    CHECK(report->value().sent_sigkill);
  }
  auto status = (*child)->try_wait();
  REQUIRE(status.ok());
  REQUIRE(status->has_value());
  CHECK(**status == ExitStatus::killed(SIGKILL));
  CHECK((*status)->describe() == "killed by signal 9 (SIGKILL)");
}

TEST_CASE("kill_tree on an empty group returns at once", "[integration]") {
  EventLoop loop;
  PosixProcessLauncher launcher(loop);
  auto child = launcher.launch(sh("exit 0"));
  REQUIRE(child.ok());
  REQUIRE((*child)->wait_blocking(5s).ok());
  auto report = shardguard::io::kill_tree_and_wait((*child)->pgid(), {}, child->get());
  REQUIRE(report.ok());
  CHECK_FALSE(report->sent_sigkill);
}

TEST_CASE("exit codes and signals are told apart", "[integration]") {
  EventLoop loop;
  PosixProcessLauncher launcher(loop);
  struct Row {
    const char* script;
    ExitStatus expected;
    const char* text;
  };
  auto row = GENERATE(values<Row>({
      {"exit 0", ExitStatus::exited(0), "exited with code 0"},
      {"exit 3", ExitStatus::exited(3), "exited with code 3"},
      {"kill -TERM $$", ExitStatus::killed(SIGTERM), "killed by signal 15 (SIGTERM)"},
      {"kill -KILL $$", ExitStatus::killed(SIGKILL), "killed by signal 9 (SIGKILL)"},
  }));
  auto child = launcher.launch(sh(row.script));
  REQUIRE(child.ok());
  auto status = (*child)->wait_blocking(5s);
  REQUIRE(status.ok());
  CHECK(*status == row.expected);
  CHECK(status->describe() == row.text);
  CHECK(status->success() == (row.expected == ExitStatus::exited(0)));
}

TEST_CASE("async_wait reports the exit on the loop", "[integration]") {
  EventLoop loop;
  PosixProcessLauncher launcher(loop);
  auto child = launcher.launch(sh("exit 7"));
  REQUIRE(child.ok());
  std::optional<Result<ExitStatus>> status;
  (*child)->async_wait([&](Result<ExitStatus> s) { status = std::move(s); });
  CHECK_FALSE(status.has_value());
  REQUIRE(loop.run_until([&] { return status.has_value(); }, 5s));
  REQUIRE(status->ok());
  CHECK(status->value() == ExitStatus::exited(7));
}

TEST_CASE("a running child: try_wait, wait timeout, signal", "[integration]") {
  EventLoop loop;
  PosixProcessLauncher launcher(loop);
  auto child = launcher.launch(spec_of({"sleep", "100"}));
  REQUIRE(child.ok());
  auto now = (*child)->try_wait();
  REQUIRE(now.ok());
  CHECK_FALSE(now->has_value());
  auto timed = (*child)->wait_blocking(20ms);
  REQUIRE_FALSE(timed.ok());
  CHECK(timed.error().code() == ErrorCode::kTimeout);
  REQUIRE((*child)->signal(SIGINT).ok());
  auto status = (*child)->wait_blocking(5s);
  REQUIRE(status.ok());
  CHECK(*status == ExitStatus::killed(SIGINT));
  CHECK((*child)->signal(SIGINT).ok());  // after exit: a no-op, not an error
}

TEST_CASE("destroying a running child kills and reaps it", "[integration]") {
  EventLoop loop;
  PosixProcessLauncher launcher(loop);
  auto child = launcher.launch(spec_of({"sleep", "100"}));
  REQUIRE(child.ok());
  const pid_t pid = (*child)->pid();
  REQUIRE(proc_exists(pid));
  child = shardguard::Error(ErrorCode::kCancelled, "dropped");
  CHECK_FALSE(proc_exists(pid));  // no zombie either
}

TEST_CASE("launch failures are errors naming the program", "[integration]") {
  EventLoop loop;
  PosixProcessLauncher launcher(loop);

  SECTION("not on PATH") {
    auto child = launcher.launch(spec_of({"nosuchprog"}));
    REQUIRE_FALSE(child.ok());
    CHECK(child.error().message() == "launch 'nosuchprog': No such file or directory");
    CHECK(child.error().code() == ErrorCode::kNotFound);
  }
  SECTION("exec of a missing path") {
    auto child = launcher.launch(spec_of({"/nonexistent/prog", "x"}));
    REQUIRE_FALSE(child.ok());
    CHECK(child.error().message() == "launch '/nonexistent/prog': No such file or directory");
  }
  SECTION("a working directory that does not exist") {
    ProcessSpec spec = sh("true");
    spec.cwd = "/nonexistent/dir";
    auto child = launcher.launch(spec);
    REQUIRE_FALSE(child.ok());
    CHECK(child.error().message() ==
          "launch 'sh': chdir '/nonexistent/dir': No such file or directory");
  }
  SECTION("a log file that cannot be opened") {
    ProcessSpec spec = sh("true");
    spec.stdout_path = "/nonexistent/dir/out.log";
    auto child = launcher.launch(spec);
    REQUIRE_FALSE(child.ok());
    CHECK_THAT(child.error().message(), Catch::StartsWith("launch 'sh': open stdout"));
  }
  SECTION("empty argv") { CHECK_FALSE(launcher.launch(ProcessSpec{}).ok()); }
}

TEST_CASE("stdout and stderr are appended to, never truncated", "[integration]") {
  EventLoop loop;
  PosixProcessLauncher launcher(loop);
  TempDir dir;
  const std::string log = dir.file("attempt.log");
  { std::ofstream(log) << "earlier\n"; }
  for (const char* word : {"first", "second"}) {
    ProcessSpec spec = sh(std::string("echo ") + word + "; echo " + word + "-err >&2");
    spec.stdout_path = log;
    spec.stderr_path = log;
    auto child = launcher.launch(spec);
    REQUIRE(child.ok());
    REQUIRE((*child)->wait_blocking(5s).ok());
  }
  CHECK(read_all(log) == "earlier\nfirst\nfirst-err\nsecond\nsecond-err\n");
}

TEST_CASE("environment, working directory and stdin", "[integration]") {
  EventLoop loop;
  PosixProcessLauncher launcher(loop);
  TempDir dir;
  const std::string out = dir.file("out");
  ::setenv("SG_IO_TEST_PARENT", "inherited", 1);

  SECTION("added to the parent's") {
    ProcessSpec spec = sh("echo $SHARDGUARD_RANK:$SG_IO_TEST_PARENT:$(pwd)");
    spec.env = {{"SHARDGUARD_RANK", "3"}};
    spec.cwd = dir.path.string();
    spec.stdout_path = out;
    auto child = launcher.launch(spec);
    REQUIRE(child.ok());
    REQUIRE((*child)->wait_blocking(5s).ok());
    CHECK(read_all(out) == "3:inherited:" + fs::canonical(dir.path).string() + "\n");
  }
  SECTION("replacing it") {
    ProcessSpec spec = sh("echo $SHARDGUARD_RANK:$SG_IO_TEST_PARENT:; cat");  // stdin: /dev/null
    spec.env_mode = ProcessSpec::EnvMode::kReplace;
    spec.env = {{"SHARDGUARD_RANK", "0"}};
    spec.stdout_path = out;
    auto child = launcher.launch(spec);
    REQUIRE(child.ok());
    REQUIRE((*child)->wait_blocking(5s).ok());
    CHECK(read_all(out) == "0::\n");
  }
  ::unsetenv("SG_IO_TEST_PARENT");
}
