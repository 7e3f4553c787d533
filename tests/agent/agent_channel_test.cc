// The agent socket (agent/agent_channel.h): strict decoding, a real server on the loop with a
// real client, and the peer rule (the job's uid and root; nobody else). `shardguard drain`
// reaching a real `shardguard run` through it is in tests/run/trainer_kill_test.cc.
#include "agent/agent_channel.h"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <thread>

#include "io/event_loop.h"
#include "tests/support/background.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::agent;
using shardguard::testing::TempDir;

namespace {

Notice drain_notice() {
  Notice n;
  n.source = "drain";
  n.kind = "drain";
  n.detail = "rack maintenance \"A\"\n";
  n.deadline = from_unix_ms(1'800'000'000'000);
  n.is_preemption = true;
  return n;
}

// A server on a loop thread that records notices and answers with `state`.
struct ServerFixture {
  TempDir dir;
  io::EventLoop loop;
  std::vector<Notice> got;
  std::mutex mu;
  std::unique_ptr<AgentSocketServer> server;
  std::thread thread;
  std::atomic<bool> done{false};

  explicit ServerFixture(uid_t job_uid) {
    server = std::make_unique<AgentSocketServer>(loop, path(), job_uid, [this](const Notice& n) {
      std::lock_guard l(mu);
      got.push_back(n);
      return Result<std::string>(std::string("checkpointing"));
    });
    REQUIRE(server->start().ok());
    thread = std::thread([this] {
      while (!done) loop.run_for(20ms);
    });
  }
  ~ServerFixture() {
    done = true;
    thread.join();
    server.reset();
  }
  std::string path() const { return dir / "agent.sock"; }
};

}  // namespace

TEST_CASE("agent channel: a notice round-trips; bad lines are refused naming the problem",
          "[agent][unit]") {
  auto back = decode_notice_request(encode_notice_request(drain_notice()));
  REQUIRE(back.ok());
  CHECK(back->detail == drain_notice().detail);
  CHECK(back->deadline == drain_notice().deadline);
  CHECK(back->is_preemption);
  const auto [line, problem] = GENERATE(table<std::string, std::string>({
      {"{", "not JSON"},
      {R"({"v":1,"type":"notice","source":"drain","kind":"drain","detail":"","deadline_unix_ms":1,"preemption":true,"x":1})",
       "unknown field 'x'"},
      {R"({"v":1,"type":"notice","source":"drain","source":"aws","kind":"drain","detail":"","deadline_unix_ms":1,"preemption":true})",
       "not JSON"},
      {R"({"v":2,"type":"notice"})", "version"},
      {R"({"v":1,"type":"exec","cmd":"rm -rf /"})", "unknown message type"},
      {R"({"v":1,"type":"notice","source":"drain","kind":"drain","detail":"","deadline_unix_ms":"soon","preemption":true})",
       "deadline_unix_ms"},
  }));
  auto r = decode_notice_request(line);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message(), Catch::Contains(problem));
}

TEST_CASE("agent channel: the run's answer comes back; nobody listening is a clear error",
          "[agent][integration]") {
  ServerFixture f(::getuid());
  auto state = send_notice(f.path(), drain_notice());
  REQUIRE(state.ok());
  CHECK(*state == "checkpointing");
  std::lock_guard l(f.mu);
  REQUIRE(f.got.size() == 1);
  CHECK(f.got[0].source == "drain");
  auto none = send_notice(f.dir / "nobody.sock", drain_notice());
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.error().message(), Catch::Contains("no run listens on"));
}

TEST_CASE("agent channel: root and the job's uid are heard; another user is not",
          "[agent][integration]") {
  if (::geteuid() != 0) {
    WARN("SKIP: needs root to act as another uid");
    return;
  }
  // The job runs as uid 65534 here; we are root, which the standalone agent is.
  ServerFixture f(65534);
  REQUIRE(::chown(f.dir.path().c_str(), 65534, 65534) == 0);
  REQUIRE(::chown(f.path().c_str(), 65534, 65534) == 0);
  REQUIRE(send_notice(f.path(), drain_notice()).ok());
  auto as = [&](uid_t uid) {
    pid_t pid = ::fork();
    if (pid == 0) {
      if (::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(3);
      ::_exit(send_notice(f.path(), drain_notice(), 2000ms).ok() ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
  };
  CHECK(as(65534) == 0);  // the job's own uid
  CHECK(as(65533) == 1);  // another user
  std::lock_guard l(f.mu);
  CHECK(f.got.size() == 2);
}
