// Lifecycle hooks: commands with the event in their environment, killed with their whole
// process group at the timeout; webhooks retried with backoff then given up; fire() never
// waits for any of it.
#include "hooks/lifecycle.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "io/event_loop.h"
#include "io/http_client.h"
#include "io/process.h"
#include "tests/support/temp_dir.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::hooks;
using shardguard::testing::TempDir;

namespace {

// Answers each request with the next of `statuses` (the last one repeats), on the loop.
class FakeHttp final : public io::HttpClient {
 public:
  FakeHttp(io::EventLoop& loop, std::vector<int> statuses) : loop_(loop), statuses_(statuses) {}
  void request(io::HttpRequest r, Callback done) override {
    const int status = statuses_[std::min(requests.size(), statuses_.size() - 1)];
    requests.push_back(std::move(r));
    loop_.post([done = std::move(done), status] { done(io::HttpResponse{status, {}, "ok"}); });
  }
  std::vector<io::HttpRequest> requests;

 private:
  io::EventLoop& loop_;
  std::vector<int> statuses_;
};

struct Rig {
  explicit Rig(std::vector<HookSpec> specs, std::vector<int> http_statuses = {200},
               bool real_http = false)
      : launcher(loop), beast(loop), fake(loop, std::move(http_statuses)), timers(loop) {
    LifecycleHooksOptions o;
    o.backoff_initial = 20ms;
    o.backoff_max = 80ms;
    auto h = LifecycleHooks::create(loop, launcher,
                                    real_http ? static_cast<io::HttpClient&>(beast) : fake, timers,
                                    RealClock::instance(), std::move(specs), o);
    if (!h.ok()) FAIL(h.error().message());
    hooks = std::move(h).value();
  }
  // fire(), timed.
  Duration fire(std::string_view event, EventFields fields = {}) {
    const auto t0 = std::chrono::steady_clock::now();
    hooks->fire(event, std::move(fields));
    return std::chrono::steady_clock::now() - t0;
  }
  bool settle(Duration timeout = 10s) {
    return loop.run_until([&] { return hooks->stats().in_flight == 0; }, timeout);
  }

  io::EventLoop loop;
  io::PosixProcessLauncher launcher;
  io::BeastHttpClient beast;
  FakeHttp fake;
  io::AsioTimerFactory timers;
  std::unique_ptr<LifecycleHooks> hooks;
};

HookSpec command_hook(std::string event, std::vector<std::string> argv, Duration timeout = 5s) {
  HookSpec s;
  s.event = std::move(event);
  s.command = std::move(argv);
  s.timeout = timeout;
  return s;
}

HookSpec url_hook(std::string event, std::string url, int retries) {
  HookSpec s;
  s.event = std::move(event);
  s.url = std::move(url);
  s.timeout = 1s;
  s.retries = retries;
  return s;
}

// True when no live process has this pid (gone, or a zombie waiting for its reaper).
bool process_gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string all((std::istreambuf_iterator<char>(stat)), {});
  const auto close = all.rfind(')');
  return close != std::string::npos && all.size() > close + 2 && all[close + 2] == 'Z';
}

// Polls the loop until `pred` holds (it depends on the outside world, not on a handler).
template <typename Pred>
bool poll_until(io::EventLoop& loop, Pred pred, Duration timeout = 5s) {
  for (auto until = std::chrono::steady_clock::now() + timeout;
       std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(2ms)) {
    loop.poll();
    if (pred()) return true;
  }
  return false;
}

// A TCP port on 127.0.0.1 where nothing listens.
int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace

TEST_CASE("hooks: specs are validated, naming the problem", "[hooks]") {
  HookSpec ok = command_hook("restart", {"true"});
  CHECK(validate_hook(ok).ok());
  CHECK(validate_hook(url_hook("give_up", "http://127.0.0.1:9/x", 3)).ok());
  auto bad = [](HookSpec s) { return validate_hook(s).error().message(); };
  HookSpec s = ok;
  s.event = "reboot";
  CHECK_THAT(bad(s), Catch::Contains("unknown event"));
  s = ok;
  s.command.clear();
  CHECK_THAT(bad(s), Catch::Contains("needs a command or a url"));
  s = ok;
  s.command = {""};
  CHECK_THAT(bad(s), Catch::Contains("empty program"));
  s = url_hook("restart", "https://example.com", 1);
  CHECK_THAT(bad(s), Catch::Contains("https://example.com"));
  s = ok;
  s.timeout = 0s;
  CHECK_THAT(bad(s), Catch::Contains("timeout"));
  s = ok;
  s.retries = 11;
  CHECK_THAT(bad(s), Catch::Contains("retries"));
  io::EventLoop loop;
  io::PosixProcessLauncher launcher(loop);
  io::BeastHttpClient http(loop);
  io::AsioTimerFactory timers(loop);
  s = ok;
  s.event = "nope";
  auto created =
      LifecycleHooks::create(loop, launcher, http, timers, RealClock::instance(), {ok, s});
  REQUIRE_FALSE(created.ok());
  CHECK_THAT(created.error().message(), Catch::StartsWith("hooks[1]: hook 'nope'"));
}

TEST_CASE("hooks: environment names of event fields", "[hooks]") {
  CHECK(event_env_name("step") == "SHARDGUARD_EVENT_STEP");
  CHECK(event_env_name("deadline_unix_ms") == "SHARDGUARD_EVENT_DEADLINE_UNIX_MS");
  CHECK(event_env_name("node-name.x") == "SHARDGUARD_EVENT_NODE_NAME_X");
}

TEST_CASE("hooks: a command gets the event in its environment", "[integration]") {
  TempDir dir;
  const std::string out = dir / "env";
  Rig rig({command_hook("checkpoint_committed", {"/bin/sh", "-c", "env > " + out})});
  CHECK(rig.hooks->fire("preempt_notice") == 0);  // no hook for it
  rig.fire("checkpoint_committed",
           {{"step", "1200"}, {"manifest", "/c/step-000001200/manifest.json"}});
  REQUIRE(rig.settle());
  CHECK(rig.hooks->stats().succeeded == 1);
  const std::string env = testing::slurp(out);
  CHECK_THAT(env, Catch::Contains("SHARDGUARD_EVENT=checkpoint_committed\n"));
  CHECK_THAT(env, Catch::Contains("SHARDGUARD_EVENT_STEP=1200\n"));
  CHECK_THAT(env, Catch::Contains("SHARDGUARD_EVENT_MANIFEST=/c/step-000001200/manifest.json\n"));
  CHECK_THAT(env, Catch::Contains("SHARDGUARD_EVENT_TIME_UNIX_MS="));
}

TEST_CASE("hooks: a failing command is counted and logged, not fatal", "[integration]") {
  Rig rig({command_hook("restart", {"/bin/false"}), command_hook("restart", {"/no/such/prog"})});
  CHECK(rig.hooks->fire("restart") == 2);
  REQUIRE(rig.settle());
  CHECK(rig.hooks->stats().failed == 2);
}

TEST_CASE("hooks: a hanging command is killed with its process group at its timeout",
          "[integration]") {
  TempDir dir;
  const std::string pids = dir / "pids";
  // The shell and a grandchild both hang; both must be gone after the timeout.
  Rig rig({command_hook("preempt_notice",
                        {"/bin/sh", "-c", "sleep 1000 & echo $$ $! > " + pids + "; wait"}, 300ms)});
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(rig.fire("preempt_notice", {{"deadline_unix_ms", "1"}}) < 10ms);
  REQUIRE(rig.settle(10s));
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 300ms);
  CHECK(took < 5s);
  const auto stats = rig.hooks->stats();
  CHECK(stats.timed_out == 1);
  CHECK(stats.failed == 1);
  std::ifstream in(pids);
  pid_t shell = 0, sleeper = 0;
  REQUIRE(in >> shell >> sleeper);
  CHECK(process_gone(shell));
  // The grandchild was SIGKILLed with the group; give its reaper (init) a moment.
  CHECK(poll_until(rig.loop, [&] { return process_gone(sleeper); }));
}

TEST_CASE("hooks: destroying the hooks kills a running command", "[integration]") {
  TempDir dir;
  const std::string pids = dir / "pid";
  pid_t shell = 0;
  {
    Rig rig(
        {command_hook("give_up", {"/bin/sh", "-c", "echo $$ > " + pids + "; sleep 1000"}, 60s)});
    rig.fire("give_up");
    REQUIRE(poll_until(rig.loop, [&] { return !testing::slurp(pids).empty(); }));
    shell = std::stoi(testing::slurp(pids));
  }
  CHECK(process_gone(shell));
}

TEST_CASE("hooks: a webhook to a closed port is retried, then given up, without delaying fire()",
          "[integration]") {
  const std::string url = "http://127.0.0.1:" + std::to_string(closed_port()) + "/hook";
  Rig rig({url_hook("node_unhealthy", url, 2)}, {}, /*real_http=*/true);
  CHECK(rig.fire("node_unhealthy", {{"node", "n1"}}) < 10ms);
  REQUIRE(rig.settle());
  const auto stats = rig.hooks->stats();
  CHECK(stats.http_attempts == 3);  // one try and two retries
  CHECK(stats.failed == 1);
  CHECK(stats.succeeded == 0);
}

TEST_CASE("hooks: a webhook POSTs the event as JSON; a 5xx is retried", "[integration]") {
  Rig rig({url_hook("restart", "http://hooks.example/x", 3)}, {503, 200});
  rig.fire("restart", {{"attempt", "2"}, {"reason", "preempted"}});
  REQUIRE(rig.settle());
  CHECK(rig.hooks->stats().succeeded == 1);
  REQUIRE(rig.fake.requests.size() == 2);
  const auto& r = rig.fake.requests[1];
  CHECK(r.method == "POST");
  CHECK(r.url == "http://hooks.example/x");
  CHECK(r.headers.get("Content-Type") == "application/json");
  auto body = boost::json::parse(r.body).as_object();
  CHECK(body.at("event") == "restart");
  CHECK(body.at("time_unix_ms").is_int64());
  CHECK(body.at("fields").as_object().at("attempt") == "2");
  CHECK(body.at("fields").as_object().at("reason") == "preempted");
}

TEST_CASE("hooks: fire() is safe from other threads and returns at once", "[integration]") {
  Rig rig({url_hook("restart", "http://hooks.example/x", 0)});
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      for (int j = 0; j < 25; ++j) CHECK(rig.fire("restart") < 10ms);
    });
  for (auto& t : threads) t.join();
  REQUIRE(rig.settle());
  CHECK(rig.hooks->stats().succeeded == 100);
  CHECK(rig.fake.requests.size() == 100);
}

namespace {

// Hook processes running now: children of this process named `comm`, seen through /proc.
int running_children(const std::string& comm) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.empty() || name[0] < '0' || name[0] > '9') continue;
    std::string all;
    try {  // a process that exits mid-read makes the stream throw
      std::ifstream in(e.path() / "stat");
      all.assign(std::istreambuf_iterator<char>(in), {});
    } catch (const std::exception&) {
      continue;
    }
    const auto open = all.find('('), close = all.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::istringstream rest(all.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == ::getpid() && state != 'Z' && all.substr(open + 1, close - open - 1) == comm) ++n;
  }
  return n;
}

// Answers each POST 5 ms later, counting how many are in flight at once.
class SlowHttp final : public io::HttpClient {
 public:
  explicit SlowHttp(io::EventLoop& loop) : timers_(loop) {}
  void request(io::HttpRequest, Callback done) override {
    peak = std::max(peak, ++in_flight);
    auto timer = timers_.make_timer();
    Timer* raw = timer.get();
    pending_.push_back(std::move(timer));
    raw->arm(5ms, [this, done = std::move(done)] {
      --in_flight;
      done(io::HttpResponse{200, {}, "ok"});
    });
  }
  int in_flight = 0;
  int peak = 0;

 private:
  io::AsioTimerFactory timers_;
  std::vector<std::unique_ptr<Timer>> pending_;
};

}  // namespace

TEST_CASE("hooks: 300 events never run more than 4 hook processes at once", "[integration]") {
  Rig rig({command_hook("checkpoint_committed", {"/bin/sleep", "0.02"})});
  // All 300 at once, as 300 claimed commits would: 4 run, 256 wait, the 40 oldest waiting
  // are dropped (counted and warned about).
  for (int i = 0; i < 300; ++i)
    rig.hooks->fire("checkpoint_committed", {{"step", std::to_string(i)}});
  std::atomic<bool> stop{false};
  std::atomic<int> most_seen{0};
  std::thread sampler([&] {
    while (!stop) {
      most_seen = std::max(most_seen.load(), running_children("sleep"));
      std::this_thread::sleep_for(1ms);
    }
  });
  const bool settled = rig.settle(60s);
  stop = true;
  sampler.join();
  REQUIRE(settled);
  const auto stats = rig.hooks->stats();
  CHECK(stats.fired == 300);
  CHECK(stats.dropped == 40);
  CHECK(stats.succeeded == 260);
  CHECK(stats.failed == 40);
  CHECK(stats.peak_commands == 4);
  CHECK(stats.queued == 0);
  CHECK(most_seen >= 2);  // the sampler did see them run side by side
  CHECK(most_seen <= 4);
}

TEST_CASE("hooks: at most 4 webhooks in flight; the queue drains in order", "[integration]") {
  io::EventLoop loop;
  io::PosixProcessLauncher launcher(loop);
  SlowHttp http(loop);
  io::AsioTimerFactory timers(loop);
  auto created = LifecycleHooks::create(loop, launcher, http, timers, RealClock::instance(),
                                        {url_hook("restart", "http://hooks.example/x", 0)});
  REQUIRE(created.ok());
  auto& hooks = *created.value();
  for (int i = 0; i < 100; ++i) hooks.fire("restart");
  REQUIRE(loop.run_until([&] { return hooks.stats().in_flight == 0; }, 20s));
  const auto stats = hooks.stats();
  CHECK(stats.succeeded == 100);
  CHECK(stats.dropped == 0);
  CHECK(stats.peak_webhooks == 4);
  CHECK(http.peak == 4);
}
