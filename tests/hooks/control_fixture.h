// A real ControlServer on a loopback Unix socket in a temp dir, its EventLoop on a thread,
// recording every event so that tests on the main thread can wait for them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "hooks/control_server.h"
#include "io/event_loop.h"
#include "io/unix_socket_server.h"
#include "tests/support/temp_dir.h"

namespace shardguard::testing {

class ControlFixture {
 public:
  struct Record {
    std::vector<hooks::RankStatus> hellos;
    std::vector<std::pair<uint32_t, uint64_t>> heartbeats;  // rank, step
    std::vector<std::pair<uint32_t, uint64_t>> begins;
    std::vector<std::pair<uint32_t, uint64_t>> committed;
    std::vector<std::pair<uint32_t, std::string>> failed;
    std::vector<std::pair<uint32_t, uint64_t>> passed;
    std::vector<uint32_t> disconnects;
    std::vector<std::string> protocol_errors;
    std::vector<StepScalars> scalars;  // of the heartbeats that carried any
  };

  explicit ControlFixture(hooks::Schedule schedule = {}) {
    hooks::ControlServerOptions o;
    o.socket_path = dir_ / "control.sock";
    auto& e = o.events;
    e.on_hello = [this](const hooks::RankStatus& r) { note([&] { rec_.hellos.push_back(r); }); };
    e.on_heartbeat = [this](const hooks::RankStatus& r, const StepScalars& scalars) {
      note([&] {
        rec_.heartbeats.emplace_back(r.rank, r.step);
        if (!scalars.empty()) rec_.scalars.push_back(scalars);
      });
    };
    e.on_checkpoint_begin = [this](uint32_t rank, uint64_t step) {
      note([&] { rec_.begins.emplace_back(rank, step); });
    };
    e.on_committed = [this](uint32_t rank, uint64_t step, const std::string&) {
      note([&] { rec_.committed.emplace_back(rank, step); });
    };
    e.on_failed = [this](uint32_t rank, uint64_t, const std::string& error) {
      note([&] { rec_.failed.emplace_back(rank, error); });
    };
    e.on_passed = [this](uint32_t rank, uint64_t step) {
      note([&] { rec_.passed.emplace_back(rank, step); });
    };
    e.on_disconnect = [this](uint32_t rank) { note([&] { rec_.disconnects.push_back(rank); }); };
    e.on_protocol_error = [this](const std::string& p) {
      note([&] { rec_.protocol_errors.push_back(p); });
    };
    server_ = std::make_unique<hooks::ControlServer>(loop_, RealClock::instance(), std::move(o));
    server_->set_schedule(schedule);
    start_status_ = server_->start();
    thread_ = std::thread([this] {
      while (!done_) loop_.run_for(std::chrono::milliseconds(50));
    });
  }

  ~ControlFixture() {
    call([this] { server_->stop(); });
    done_ = true;
    loop_.stop();
    thread_.join();
    server_.reset();
  }

  const Status& start_status() const { return start_status_; }
  std::string path() const { return dir_ / "control.sock"; }
  const std::string& dir() const { return dir_.path(); }

  // Runs `fn` on the loop thread and waits for it.
  void call(std::function<void()> fn) {
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
  size_t send_all(const hooks::AgentMessage& msg) {
    size_t n = 0;
    call([&] { n = server_->send_all(msg); });
    return n;
  }

  // Waits until `pred` holds over the record (up to `timeout`).
  bool wait(const std::function<bool(const Record&)>& pred,
            std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return pred(rec_); });
  }
  Record record() {
    std::lock_guard lock(mu_);
    return rec_;
  }

 private:
  template <typename F>
  void note(F f) {
    {
      std::lock_guard lock(mu_);
      f();
    }
    cv_.notify_all();
  }

  TempDir dir_;
  io::EventLoop loop_;
  std::unique_ptr<hooks::ControlServer> server_;
  Status start_status_;
  std::atomic<bool> done_{false};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  Record rec_;
};

}  // namespace shardguard::testing
