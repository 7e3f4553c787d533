#include "core/clock.h"

namespace shardguard {

RealClock& RealClock::instance() {
  static RealClock clock;
  return clock;
}

class FakeClock::FakeTimer final : public Timer {
 public:
  explicit FakeTimer(FakeClock& clock) : clock_(clock) {}
  ~FakeTimer() override { cancel(); }

  void arm(Duration after, std::function<void()> callback) override {
    cancel();
    deadline_ = clock_.now() + after;
    auto fire = [this, cb = std::move(callback)] {
      id_ = 0;
      cb();
    };
    id_ = clock_.schedule(deadline_, std::move(fire));
  }
  void cancel() override {
    if (id_ != 0) clock_.unschedule(deadline_, id_);
    id_ = 0;
  }
  bool armed() const override { return id_ != 0; }

 private:
  FakeClock& clock_;
  SteadyTime deadline_{};
  uint64_t id_ = 0;
};

FakeClock::FakeClock(WallTime wall_start) : steady_(std::chrono::hours(1)), wall_(wall_start) {}
FakeClock::~FakeClock() = default;

SteadyTime FakeClock::now() const {
  std::lock_guard lock(mu_);
  return steady_;
}

WallTime FakeClock::wall_now() const {
  std::lock_guard lock(mu_);
  return wall_;
}

std::unique_ptr<Timer> FakeClock::make_timer() { return std::make_unique<FakeTimer>(*this); }

uint64_t FakeClock::schedule(SteadyTime deadline, std::function<void()> callback) {
  std::lock_guard lock(mu_);
  uint64_t id = next_id_++;
  timers_.emplace(TimerKey{deadline, id}, std::move(callback));
  return id;
}

void FakeClock::unschedule(SteadyTime deadline, uint64_t id) {
  std::lock_guard lock(mu_);
  timers_.erase(TimerKey{deadline, id});
}

void FakeClock::advance(Duration d) {
  std::unique_lock lock(mu_);
  const SteadyTime target = steady_ + d;
  // Fire one timer at a time: a callback may arm or cancel timers.
  while (!timers_.empty() && timers_.begin()->first.first <= target) {
    auto node = timers_.extract(timers_.begin());
    wall_ += node.key().first - steady_;
    steady_ = node.key().first;
    lock.unlock();
    node.mapped()();
    lock.lock();
  }
  wall_ += target - steady_;
  steady_ = target;
}

size_t FakeClock::pending_timers() const {
  std::lock_guard lock(mu_);
  return timers_.size();
}

}  // namespace shardguard
