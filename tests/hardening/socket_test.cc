// Sockets in run directories:
//   - finding: the control socket fell back to a guessable /tmp/shardguard-<pid>.sock when
//     the run directory's path was too long for a socket address (another user creating
//     that name first stopped `run`): it is now always <run_dir>/control.sock, bound and
//     reached through the directory's descriptor;
//   - finding: the standalone agent (root) followed a user's symlinked run directory: a link
//     for the run directory or for its agent.sock is refused, and nothing is delivered.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <mutex>
#include <thread>

#include "agent/agent_channel.h"
#include "io/event_loop.h"
#include "io/unix_socket_server.h"
#include "supervisor/rank_env.h"
#include "tests/hardening/temp_user.h"
#include "tests/support/temp_dir.h"

using namespace std::chrono_literals;
using namespace shardguard;
using shardguard::testing::TempDir;
namespace stdfs = std::filesystem;

namespace {

// The loop on its own thread for the length of a test.
struct LoopThread {
  io::EventLoop loop;
  std::atomic<bool> done{false};
  std::thread thread;
  void start() {
    thread = std::thread([this] {
      while (!done) loop.run_for(20ms);
    });
  }
  ~LoopThread() {
    done = true;
    if (thread.joinable()) thread.join();
  }
};

std::vector<std::string> tmp_sockets() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(stdfs::temp_directory_path(), ec))
    if (e.path().filename().string().starts_with("shardguard-") && e.path().extension() == ".sock")
      out.push_back(e.path());
  return out;
}

}  // namespace

TEST_CASE("a run directory too long for a socket address keeps its socket inside",
          "[integration]") {
  TempDir tmp;
  std::string run_dir = tmp.path();
  while (run_dir.size() < 180) run_dir += "/a-rather-long-directory-name";
  stdfs::create_directories(run_dir);
  const auto before = tmp_sockets();
  const std::string path = supervisor::control_socket_path(run_dir);
  CHECK(path == run_dir + "/control.sock");
  REQUIRE(path.size() > 108);

  LoopThread t;
  std::mutex mu;
  std::vector<std::string> lines;
  io::UnixSocketServerOptions o;
  o.path = path;
  o.on_line = [&](io::ConnectionId, std::string line) {
    std::lock_guard l(mu);
    lines.push_back(std::move(line));
  };
  io::UnixSocketServer server(t.loop, o);
  REQUIRE(server.start().ok());
  t.start();
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 0777) == 0600);
  auto client = io::UnixSocketClient::connect(path);
  REQUIRE(client.ok());
  REQUIRE(client->send_line("hello from a long path").ok());
  bool heard = false;
  for (int i = 0; i < 100 && !heard; ++i) {
    std::this_thread::sleep_for(20ms);
    std::lock_guard l(mu);
    heard = !lines.empty();
  }
  CHECK(heard);
  CHECK(tmp_sockets() == before);  // nothing placed in the shared /tmp
  // A second server on the same long path sees the live one (no silent takeover).
  io::UnixSocketServer second(t.loop, o);
  CHECK_FALSE(second.start().ok());
}

TEST_CASE("send_notice never follows a link for the run directory or its socket", "[integration]") {
  // A run's directory the caller may not be led into: root-only when we are root.
  TempDir tmp;
  REQUIRE(::chmod(tmp.path().c_str(), 0711) == 0);
  const std::string private_run = tmp / "private-run";
  stdfs::create_directories(private_run);
  REQUIRE(::chmod(private_run.c_str(), 0700) == 0);
  LoopThread t;
  std::mutex mu;
  int delivered = 0;
  agent::AgentSocketServer server(t.loop, agent::agent_socket_path(private_run), ::getuid(),
                                  [&](const agent::Notice&) -> Result<std::string> {
                                    std::lock_guard l(mu);
                                    ++delivered;
                                    return std::string("checkpointing");
                                  });
  REQUIRE(server.start().ok());
  t.start();
  agent::Notice n;
  n.source = "aws";
  n.kind = "spot-interruption";
  n.deadline = from_unix_ms(1'800'000'000'000);
  n.is_preemption = true;

  // What a user owns: a run directory that is a link, and a run directory whose socket is.
  testing::TemporaryUser user("a");
  if (!user.ok()) WARN("links made by this process, not another user: " << user.why());
  const std::string home = tmp / "home";
  stdfs::create_directories(home + "/run-b");
  stdfs::create_directory_symlink(private_run, home + "/run-a");
  stdfs::create_symlink(agent::agent_socket_path(private_run), home + "/run-b/agent.sock");
  if (user.ok())
    REQUIRE(
        testing::run_command("chown -hR " + std::to_string(user.uid()) + " " + home).exit_code ==
        0);

  auto via_dir = agent::send_notice(agent::agent_socket_path(home + "/run-a"), n, 2000ms);
  REQUIRE_FALSE(via_dir.ok());
  CHECK_THAT(via_dir.error().message(), Catch::Contains("is a symbolic link; not followed"));
  auto via_socket = agent::send_notice(agent::agent_socket_path(home + "/run-b"), n, 2000ms);
  REQUIRE_FALSE(via_socket.ok());
  CHECK_THAT(via_socket.error().message(), Catch::Contains("is a symbolic link"));
  {
    std::lock_guard l(mu);
    CHECK(delivered == 0);
  }
  // The run's own path still works.
  auto direct = agent::send_notice(agent::agent_socket_path(private_run), n, 2000ms);
  CHECK(direct.ok());
  if (user.ok()) {
    // A socket that is not the run directory owner's (root's, hard-linked in) is refused.
    const std::string run_c = home + "/run-c";
    stdfs::create_directories(run_c);
    REQUIRE(::chown(run_c.c_str(), user.uid(), user.gid()) == 0);
    REQUIRE(::link(agent::agent_socket_path(private_run).c_str(),
                   (run_c + "/agent.sock").c_str()) == 0);
    auto linked = agent::send_notice(agent::agent_socket_path(run_c), n, 2000ms);
    REQUIRE_FALSE(linked.ok());
    CHECK_THAT(linked.error().message(), Catch::Contains("not to the run directory's owner"));
  }
  std::lock_guard l(mu);
  CHECK(delivered == 1);
}
