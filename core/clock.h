// Time as an injected dependency: components read the time and arm timers only through
// Clock and TimerFactory, so tests can drive time with FakeClock instead of sleeping.
//
// Thread-safety: RealClock is thread-safe. FakeClock is meant for single-threaded tests
// (advance() fires callbacks on the calling thread); its methods take a lock so that a
// reader on another thread sees a consistent time.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

namespace shardguard {

using Duration = std::chrono::nanoseconds;
using SteadyTime = std::chrono::steady_clock::time_point;
using WallTime = std::chrono::system_clock::time_point;

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time, for deadlines and intervals.
  virtual SteadyTime now() const = 0;
  // Calendar time, for records and for deadlines that come from the outside (cloud notices).
  virtual WallTime wall_now() const = 0;
};

// One-shot timer. Re-arming replaces the previous deadline; destroying cancels.
class Timer {
 public:
  virtual ~Timer() = default;
  virtual void arm(Duration after, std::function<void()> callback) = 0;
  virtual void cancel() = 0;
  virtual bool armed() const = 0;
};

class TimerFactory {
 public:
  virtual ~TimerFactory() = default;
  virtual std::unique_ptr<Timer> make_timer() = 0;
};

class RealClock final : public Clock {
 public:
  SteadyTime now() const override { return std::chrono::steady_clock::now(); }
  WallTime wall_now() const override { return std::chrono::system_clock::now(); }
  static RealClock& instance();
};

// Time stands still until advance(); timers made by it fire from advance(), in deadline
// order, each seeing now() equal to its own deadline.
class FakeClock final : public Clock, public TimerFactory {
 public:
  explicit FakeClock(WallTime wall_start = WallTime(std::chrono::seconds(1'700'000'000)));
  ~FakeClock() override;

  SteadyTime now() const override;
  WallTime wall_now() const override;
  std::unique_ptr<Timer> make_timer() override;

  // Moves time forward by `d`, firing every timer that falls due on the way.
  void advance(Duration d);
  // Number of armed timers (for tests that check nothing is left pending).
  size_t pending_timers() const;

 private:
  class FakeTimer;
  friend class FakeTimer;
  using TimerKey = std::pair<SteadyTime, uint64_t>;

  uint64_t schedule(SteadyTime deadline, std::function<void()> callback);
  void unschedule(SteadyTime deadline, uint64_t id);

  mutable std::mutex mu_;
  SteadyTime steady_;
  WallTime wall_;
  uint64_t next_id_ = 1;
  std::map<TimerKey, std::function<void()>> timers_;
};

// Milliseconds since the Unix epoch: the unit of deadlines in the control protocol.
inline int64_t to_unix_ms(WallTime t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}
inline WallTime from_unix_ms(int64_t ms) { return WallTime(std::chrono::milliseconds(ms)); }

}  // namespace shardguard
