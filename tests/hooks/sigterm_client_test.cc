// SIGTERM on the job side (issue 12, "SIGTERM to every process"): the `signal` message of the
// control protocol, the ControlServer's event for it, and the C++ client catching a real
// SIGTERM: under shardguard it only tells the supervisor and keeps training until the
// supervisor's checkpoint_now names the step; a `stop` that came first wins; opting out
// leaves SIGTERM alone; outside shardguard (when asked for) it saves the step at hand.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "hooks/client.h"
#include "hooks/control_server.h"
#include "hooks/protocol.h"
#include "io/event_loop.h"
#include "io/unix_socket_server.h"
#include "tests/support/temp_dir.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::hooks;
using shardguard::testing::TempDir;

namespace {

// A ControlServer on its own loop thread that records hellos, signals and protocol errors.
class SignalServer {
 public:
  SignalServer() {
    ControlServerOptions o;
    o.socket_path = dir_ / "control.sock";
    o.events.on_hello = [this](const RankStatus& r) { note([&] { hellos_.push_back(r.rank); }); };
    o.events.on_signal = [this](uint32_t rank, const std::string& name) {
      note([&] { signals_.emplace_back(rank, name); });
    };
    o.events.on_protocol_error = [this](const std::string& p) {
      note([&] { errors_.push_back(p); });
    };
    server_ = std::make_unique<ControlServer>(loop_, RealClock::instance(), std::move(o));
    REQUIRE(server_->start().ok());
    thread_ = std::thread([this] {
      while (!done_) loop_.run_for(50ms);
    });
  }
  ~SignalServer() {
    call([this] { server_->stop(); });
    done_ = true;
    loop_.stop();
    thread_.join();
  }

  std::string path() const { return dir_ / "control.sock"; }
  void send_all(const AgentMessage& m) {
    call([&] { server_->send_all(m); });
  }
  // Waits (bounded) until `pred` holds; `pred` reads through the accessors below.
  template <typename Pred>
  bool wait(Pred pred, std::chrono::milliseconds timeout = 5s) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
      std::unique_lock l(mu_);
      if (cv_.wait_until(l, std::min(until, std::chrono::steady_clock::now() + 20ms)) ==
              std::cv_status::timeout &&
          std::chrono::steady_clock::now() >= until)
        return false;
    }
    return true;
  }
  std::vector<std::pair<uint32_t, std::string>> signals() {
    std::lock_guard l(mu_);
    return signals_;
  }
  size_t hellos() {
    std::lock_guard l(mu_);
    return hellos_.size();
  }
  std::vector<std::string> errors() {
    std::lock_guard l(mu_);
    return errors_;
  }

 private:
  void call(const std::function<void()>& fn) {
    std::mutex m;
    std::condition_variable cv;
    bool ran = false;
    loop_.post([&] {
      fn();
      std::lock_guard l(m);
      ran = true;
      cv.notify_all();
    });
    std::unique_lock l(m);
    cv.wait(l, [&] { return ran; });
  }
  template <typename F>
  void note(F f) {
    {
      std::lock_guard l(mu_);
      f();
    }
    cv_.notify_all();
  }

  TempDir dir_;
  io::EventLoop loop_;
  std::unique_ptr<ControlServer> server_;
  std::atomic<bool> done_{false};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint32_t> hellos_;
  std::vector<std::pair<uint32_t, std::string>> signals_;
  std::vector<std::string> errors_;
};

std::unique_ptr<Client> make_client(const std::string& ckpt, const std::string& socket,
                                    std::optional<bool> handle_sigterm = std::nullopt) {
  ClientOptions o;
  o.job_id = "test-job";
  o.checkpoint_dir = ckpt;
  o.control_socket = socket;
  o.under_shardguard = !socket.empty();
  o.handle_sigterm = handle_sigterm;
  auto c = Client::create(o);
  if (!c.ok()) FAIL(c.error().message());
  return std::move(c).value();
}

template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = 5s) {
  for (auto until = std::chrono::steady_clock::now() + timeout;
       std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(2ms))
    if (pred()) return true;
  return pred();
}

Status save_step(Client& c, uint64_t step) {
  static const std::vector<float> data = {1.5f, -2.0f};
  auto w = c.begin_save(step);
  SG_RETURN_IF_ERROR(
      w.add_tensor("w", checkpoint::DType::kF32, {2}, std::as_bytes(std::span(data))));
  w.set_rank_state({"rng", "{}", "null"});
  w.set_global_state({step, "null", "null"});
  return c.save(std::move(w));
}

// One message without its newline (send_line adds it).
std::string line_of(const JobMessage& m) {
  std::string l = encode(m);
  l.pop_back();
  return l;
}

// The handler SIGTERM has now.
void (*term_handler())(int) {
  struct sigaction sa {};
  ::sigaction(SIGTERM, nullptr, &sa);
  return sa.sa_handler;
}

}  // namespace

TEST_CASE("protocol: signal{name} round-trips and is parsed strictly", "[unit]") {
  const std::string line = encode(JobMessage{SignalReceived{"SIGTERM"}});
  CHECK(line == "{\"v\":2,\"type\":\"signal\",\"name\":\"SIGTERM\"}\n");
  auto back = decode_job_message(line);
  REQUIRE(back.ok());
  REQUIRE(std::holds_alternative<SignalReceived>(*back));
  CHECK(std::get<SignalReceived>(*back).name == "SIGTERM");
  CHECK(message_type(*back) == "signal");
  CHECK(decode_job_message("{\"v\":2,\"type\":\"signal\",\"name\":\"SIGINT\"}").ok());
  const auto bad = GENERATE(as<std::string>{}, "{\"v\":2,\"type\":\"signal\"}",
                            "{\"v\":2,\"type\":\"signal\",\"name\":\"SIGUSR1\"}",
                            "{\"v\":2,\"type\":\"signal\",\"name\":15}",
                            "{\"v\":2,\"type\":\"signal\",\"name\":\"SIGTERM\",\"pid\":1}");
  INFO(bad);
  auto r = decode_job_message(bad);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message(), Catch::Contains("signal"));
}

TEST_CASE("control server: a rank's signal is an event, refused before hello", "[integration]") {
  SignalServer s;
  TempDir ckpt;
  {
    // A raw connection that never said hello.
    auto raw = io::UnixSocketClient::connect(s.path());
    REQUIRE(raw.ok());
    REQUIRE(raw->send_line("{\"v\":2,\"type\":\"signal\",\"name\":\"SIGTERM\"}").ok());
    REQUIRE(s.wait([&] { return !s.errors().empty(); }));
    CHECK_THAT(s.errors()[0], Catch::Contains("signal before hello"));
    CHECK(s.signals().empty());
  }
  auto c = make_client(ckpt.path(), s.path(), false);  // no handler: the message by hand
  REQUIRE(s.wait([&] { return s.hellos() == 1; }));
  auto raw = io::UnixSocketClient::connect(s.path());
  REQUIRE(raw.ok());
  REQUIRE(raw->send_line(line_of(Hello{1, 2, ::getpid(), "test-job", 0})).ok());
  REQUIRE(s.wait([&] { return s.hellos() == 2; }));
  REQUIRE(raw->send_line(line_of(SignalReceived{"SIGTERM"})).ok());
  REQUIRE(s.wait([&] { return s.signals().size() == 1; }));
  CHECK(s.signals()[0] == std::pair<uint32_t, std::string>{1, "SIGTERM"});
}

TEST_CASE(
    "client under shardguard: SIGTERM is reported by itself, training goes on, the supervisor's "
    "step is saved, then should_exit",
    "[integration]") {
  SignalServer s;
  TempDir ckpt;
  auto c = make_client(ckpt.path(), s.path());
  REQUIRE(c->handles_sigterm());
  REQUIRE(s.wait([&] { return s.hellos() == 1; }));
  CHECK_FALSE(c->should_checkpoint(3));
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(::kill(::getpid(), SIGTERM) == 0);  // the process survives: the handler only sets a flag
  // No call into the client: its reader thread reports within about 100 ms.
  REQUIRE(s.wait([&] { return s.signals().size() == 1; }, 2s));
  const auto latency = std::chrono::steady_clock::now() - t0;
  CHECK(latency < 1s);
  CHECK(s.signals()[0] == std::pair<uint32_t, std::string>{0, "SIGTERM"});
  std::printf("SIGTERM reported %.0f ms after it arrived\n",
              std::chrono::duration<double, std::milli>(latency).count());
  // Training goes on: the client never picks the step itself.
  CHECK_FALSE(c->should_checkpoint(4));
  CHECK_FALSE(c->should_exit());
  CHECK_FALSE(c->emergency().has_value());
  const int64_t deadline = to_unix_ms(RealClock::instance().wall_now() + 60s);
  s.send_all(CheckpointNow{deadline, RequestKind::kEmergency, "sigterm", 6});
  REQUIRE(eventually([&] { return c->requested_step() == 6u; }));
  CHECK_FALSE(c->should_checkpoint(5));
  REQUIRE(c->should_checkpoint(6));
  REQUIRE(save_step(*c, 6).ok());
  CHECK(c->should_exit());
  // One report per signal.
  std::this_thread::sleep_for(300ms);
  CHECK(s.signals().size() == 1);
}

TEST_CASE("client under shardguard: a stop that came first wins over a later SIGTERM",
          "[integration]") {
  SignalServer s;
  TempDir ckpt;
  auto c = make_client(ckpt.path(), s.path());
  REQUIRE(s.wait([&] { return s.hellos() == 1; }));
  s.send_all(Stop{to_unix_ms(RealClock::instance().wall_now() + 3s)});
  REQUIRE(eventually([&] { return c->should_exit(); }));
  REQUIRE(::raise(SIGTERM) == 0);
  c->heartbeat(8);
  CHECK_FALSE(c->should_checkpoint(8));
  CHECK(c->should_exit());
  CHECK_FALSE(c->emergency().has_value());
}

TEST_CASE("client: opting out leaves SIGTERM alone; the handler goes with the client",
          "[integration]") {
  TempDir ckpt;
  const auto before = term_handler();
  SECTION("under shardguard, handle_sigterm = false") {
    SignalServer s;
    auto c = make_client(ckpt.path(), s.path(), false);
    CHECK_FALSE(c->handles_sigterm());
    CHECK(term_handler() == before);
  }
  SECTION("SHARDGUARD_HANDLE_SIGTERM=0 over the environment") {
    SignalServer s;
    ::setenv("SHARDGUARD_JOB_ID", "test-job", 1);
    ::setenv("SHARDGUARD_CONTROL_SOCKET", s.path().c_str(), 1);
    ::setenv("SHARDGUARD_CHECKPOINT_DIR", ckpt.path().c_str(), 1);
    ::setenv("SHARDGUARD_HANDLE_SIGTERM", "0", 1);
    auto c = Client::from_env();
    ::setenv("SHARDGUARD_HANDLE_SIGTERM", "yes", 1);
    auto bad = Client::from_env();
    for (const char* v : {"SHARDGUARD_JOB_ID", "SHARDGUARD_CONTROL_SOCKET",
                          "SHARDGUARD_CHECKPOINT_DIR", "SHARDGUARD_HANDLE_SIGTERM"})
      ::unsetenv(v);
    REQUIRE(c.ok());
    CHECK_FALSE((*c)->handles_sigterm());
    CHECK(term_handler() == before);
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(bad.error().message(), Catch::Contains("SHARDGUARD_HANDLE_SIGTERM='yes'"));
  }
  SECTION("outside shardguard, by default") {
    auto c = make_client(ckpt.path(), "");
    CHECK_FALSE(c->handles_sigterm());
    CHECK(term_handler() == before);
  }
  SECTION("the client's handler is there while it lives, the old one after") {
    SignalServer s;
    {
      auto c = make_client(ckpt.path(), s.path());
      CHECK(term_handler() != before);
      ::signal(SIGTERM, SIG_IGN);                  // a host replaced it...
      REQUIRE(c->restore_signal_handlers().ok());  // ...and puts the client's back
      CHECK(term_handler() != SIG_IGN);
      CHECK(term_handler() != before);
    }
    CHECK(term_handler() == before);
  }
}

TEST_CASE("client outside shardguard, asked to catch SIGTERM: saves the step at hand, then exits",
          "[integration]") {
  TempDir ckpt;
  auto c = make_client(ckpt.path(), "", true);
  REQUIRE(c->handles_sigterm());
  CHECK_FALSE(c->should_checkpoint(2));
  REQUIRE(::raise(SIGTERM) == 0);
  REQUIRE(c->should_checkpoint(3));
  REQUIRE(c->emergency().has_value());
  CHECK(c->emergency()->at_step == 3);
  CHECK(c->emergency()->reason == "sigterm");
  REQUIRE(save_step(*c, 3).ok());
  CHECK(c->should_exit());
}

TEST_CASE("client: Client::notify_sigterm() acts as the signal (hosts that catch it)",
          "[integration]") {
  SignalServer s;
  TempDir ckpt;
  auto c = make_client(ckpt.path(), s.path());
  REQUIRE(s.wait([&] { return s.hellos() == 1; }));
  Client::notify_sigterm();
  REQUIRE(s.wait([&] { return s.signals().size() == 1; }, 2s));
  CHECK(s.signals()[0].second == "SIGTERM");
}
