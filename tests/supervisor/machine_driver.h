// Drives an AttemptMachine in made-up time for unit tests: keeps the timers it arms and fires
// them as time advances, remembers every command, and plays the nodes' part on request
// (answering FindResume, confirming launches and teardowns).
#pragma once

#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "supervisor/attempt_machine.h"

namespace shardguard::testing {

using namespace supervisor;
using namespace std::chrono_literals;

class MachineDriver {
 public:
  explicit MachineDriver(MachineConfig cfg, double jitter01 = 0.5)
      : machine_(std::move(cfg), [jitter01] { return jitter01; }) {}

  // --- time -------------------------------------------------------------------------------
  Now now() const { return now_; }
  // Moves time forward, firing due timers in order (each sees its own deadline as now).
  void advance(Duration d) {
    const SteadyTime until = now_.steady + d;
    for (;;) {
      std::optional<std::pair<SteadyTime, TimerId>> next;
      for (const auto& [id, at] : timers_)
        if (at <= until && (!next || at < next->first)) next = {at, id};
      if (!next) break;
      set_time(next->first);
      timers_.erase(next->second);
      feed(event::TimerFired{next->second});
    }
    set_time(until);
  }
  bool timer_armed(TimerId id) const { return timers_.contains(id); }
  std::optional<Duration> timer_in(TimerId id) const {
    auto it = timers_.find(id);
    if (it == timers_.end()) return std::nullopt;
    return it->second - now_.steady;
  }

  // --- feeding ----------------------------------------------------------------------------
  Commands start(Epoch first = 0) { return take(machine_.start(now_, first)); }
  Commands adopt(const CoordinatorState& state) { return take(machine_.adopt(now_, state)); }
  Commands feed(const Event& e) { return take(machine_.handle(now_, e)); }

  // Answers a pending FindResume with `step` (nullopt: fresh start).
  Commands resume(std::optional<uint64_t> step) {
    auto fr = last<command::FindResume>();
    REQUIRE(fr);
    return feed(event::ResumeFound{fr->epoch, step,
                                   step ? "ckpt/step-" + std::to_string(*step) + "/manifest.json" : ""});
  }
  // Confirms that every node of the last Launch started its ranks.
  void launched() {
    auto l = last<command::Launch>();
    REQUIRE(l);
    for (const auto& slot : l->nodes) feed(event::NodeLaunched{l->epoch, slot.node});
  }
  // Joins node 0, resumes from `step` and confirms the launch: a running single-node job.
  void start_single(std::optional<uint64_t> step = std::nullopt, Epoch first = 0) {
    start(first);
    feed(event::NodeJoined{0, "10.0.0.1"});
    resume(step);
    launched();
  }
  Epoch epoch() const { return machine_.epoch(); }
  uint32_t world() const {
    auto l = last<command::Launch>();
    return l ? l->world_size : 0;
  }
  void hello_all() {
    for (uint32_t r = 0; r < world(); ++r) feed(event::RankHello{epoch(), r, 1000 + r});
  }
  void beat(uint64_t step) {
    event::Heartbeats h{epoch(), {}, std::nullopt};
    for (uint32_t r = 0; r < world(); ++r) h.ranks.push_back({r, step, {}});
    feed(h);
  }
  void beat_rank(uint32_t rank, uint64_t step) { feed(event::Heartbeats{epoch(), {{rank, step, {}}}, std::nullopt}); }
  Commands exit_rank(uint32_t rank, int code, int signal = 0, bool during_teardown = false) {
    event::RankExited e{epoch(), rank, signal != 0, code, signal, during_teardown,
                        signal != 0 ? "killed by signal " + std::to_string(signal)
                                    : "exited with code " + std::to_string(code)};
    exited_.insert({e.epoch, e.rank});
    return feed(e);
  }
  // Plays the nodes' teardown: every rank still running is killed (during_teardown), then
  // each node of the epoch confirms.
  void confirm_teardown() {
    auto l = last<command::Launch>();
    REQUIRE(l);
    for (uint32_t r = 0; r < l->world_size; ++r)
      if (!exited_.contains({l->epoch, r}))
        feed(event::RankExited{l->epoch, r, true, 0, 9, true, "killed by signal 9 (SIGKILL)"});
    for (const auto& slot : l->nodes) feed(event::NodeStopped{l->epoch, slot.node});
  }
  Commands commit(uint64_t step) {
    return feed(event::Committed{epoch(), step, "ckpt/step-" + std::to_string(step) + "/manifest.json", 0});
  }
  Commands notice(Duration left, std::string kind = "spot-interruption", NodeId node = 0,
                  uint64_t id = 0) {
    event::Notice n;
    n.node = node;
    n.source = "aws";
    n.kind = std::move(kind);
    n.deadline = now_.wall + std::chrono::duration_cast<WallTime::duration>(left);
    n.id = id;
    return feed(n);
  }

  // --- inspection -------------------------------------------------------------------------
  AttemptMachine& machine() { return machine_; }
  const std::vector<Command>& all() const { return all_; }
  template <typename T>
  std::vector<T> all_of() const {
    std::vector<T> out;
    for (const auto& c : all_)
      if (auto* p = std::get_if<T>(&c)) out.push_back(*p);
    return out;
  }
  template <typename T>
  std::optional<T> last() const {
    for (auto it = all_.rbegin(); it != all_.rend(); ++it)
      if (auto* p = std::get_if<T>(&*it)) return *p;
    return std::nullopt;
  }
  // Records of one type, in order.
  std::vector<command::Record> records(const std::string& type) const {
    std::vector<command::Record> out;
    for (const auto& r : all_of<command::Record>())
      if (r.type == type) out.push_back(r);
    return out;
  }
  static std::string field(const command::Record& r, const std::string& key) {
    for (const auto& f : r.fields)
      if (f.key == key)
        return std::visit(
            [](const auto& v) -> std::string {
              using V = std::decay_t<decltype(v)>;
              if constexpr (std::is_same_v<V, std::string>) return v;
              else if constexpr (std::is_same_v<V, bool>) return v ? "true" : "false";
              else return std::to_string(v);
            },
            f.value);
    return "";
  }
  std::string last_field(const std::string& type, const std::string& key) const {
    auto r = records(type);
    return r.empty() ? "" : field(r.back(), key);
  }
  void clear() { all_.clear(); }

 private:
  void set_time(SteadyTime t) {
    now_.wall += std::chrono::duration_cast<WallTime::duration>(t - now_.steady);
    now_.steady = t;
  }
  Commands take(Commands cs) {
    for (const auto& c : cs) {
      if (auto* a = std::get_if<command::ArmTimer>(&c)) timers_[a->id] = a->at;
      if (auto* x = std::get_if<command::CancelTimer>(&c)) timers_.erase(x->id);
      all_.push_back(c);
    }
    return cs;
  }
  AttemptMachine machine_;
  Now now_{SteadyTime(std::chrono::hours(1000)), WallTime(std::chrono::seconds(1'700'000'000))};
  std::map<TimerId, SteadyTime> timers_;
  std::vector<Command> all_;
  std::set<std::pair<Epoch, uint32_t>> exited_;  // so confirm_teardown kills only the others
};

}  // namespace shardguard::testing
