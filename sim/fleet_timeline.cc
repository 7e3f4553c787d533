#include "sim/fleet_timeline.h"

#include <cmath>
#include <limits>
#include <queue>

#include "sim/fleet_config.h"
#include "sim/random_streams.h"

namespace shardguard::sim {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

enum class Due { kUp, kFailure, kNotice, kGone, kTick };

struct Item {
  double t;
  uint64_t seq;
  Due what;
  uint32_t slot;
  uint64_t token;  // the slot's machine it belongs to; stale once that machine is gone
};
struct Later {
  bool operator()(const Item& a, const Item& b) const {
    return a.t > b.t || (a.t == b.t && a.seq > b.seq);
  }
};

struct Slot {
  Stream failures, preempt;
  bool alive = false;
  bool going = false;    // notified, or chosen by the availability trace
  bool wanting = false;  // down, waiting for the availability trace to allow a replacement
  uint32_t machines = 0;
  uint32_t node = 0;
  uint64_t token = 0;
  int64_t trace_offset = 0;  // ticks
  double deadline = 0;
};

class Generator {
 public:
  Generator(const FleetConfig& c, uint64_t seed)
      : c_(c), capacity_rng_(derive_seed(seed, kCapacityStream)) {
    out_.slots = c.job.nodes + c.costs.spare_nodes;
    out_.causes = causes_of(c.failures);
    double total = 0;
    for (const auto& cause : out_.causes) cumulative_.push_back(total += cause.weight);
    node_rate_ = gpu_failure_rate(c.failures) * c.job.gpus_per_node;
    if (total <= 0) node_rate_ = 0;
    availability_ =
        !c.preemption.traces.empty() && c.preemption.trace_kind == TraceKind::kAvailability;
    if (availability_ && c.preemption.trace_random_offset) {  // each seed starts somewhere else
      Stream pick(derive_seed(seed, kTraceStream, c.job.nodes + c.costs.spare_nodes));
      capacity_offset_ = static_cast<int64_t>(pick.below(c.preemption.traces.front().data.size()));
    }
    for (uint32_t s = 0; s < out_.slots; ++s) {
      slots_.push_back(Slot{Stream(derive_seed(seed, kFailureStream, s)),
                            Stream(derive_seed(seed, kPreemptionStream, s))});
      if (!c.preemption.traces.empty() && c.preemption.trace_random_offset) {
        const auto& tr = c.preemption.traces[s % c.preemption.traces.size()];
        Stream pick(derive_seed(seed, kTraceStream, s));
        slots_.back().trace_offset = static_cast<int64_t>(pick.below(tr.data.size()));
      }
    }
  }

  FleetTimeline run() {
    for (uint32_t s = 0; s < out_.slots; ++s) push(0, Due::kUp, s, 0);
    pending_ups_ = out_.slots;
    if (availability_) push(0, Due::kTick, 0, 0);
    while (!queue_.empty()) {
      const Item it = queue_.top();
      queue_.pop();
      handle(it);
    }
    return std::move(out_);
  }

 private:
  void push(double t, Due what, uint32_t slot, uint64_t token) {
    if (t > c_.duration || !std::isfinite(t)) return;
    queue_.push({t, seq_++, what, slot, token});
  }
  void emit(double t, FleetEventKind kind, uint32_t slot, int32_t cause = -1, double deadline = 0) {
    out_.events.push_back({t, kind, slot, slots_[slot].node, cause, deadline});
  }

  void handle(const Item& it) {
    Slot& s = slots_[it.slot];
    if (it.what == Due::kTick) return tick(it.t);
    if (it.what == Due::kUp) return up(it.t, it.slot);
    if (!s.alive || it.token != s.token) return;  // that machine is already gone
    switch (it.what) {
      case Due::kFailure:
        return failure(it.t, it.slot);
      case Due::kNotice:
        s.going = true;
        return emit(it.t, FleetEventKind::kNotice, it.slot, -1, s.deadline);
      case Due::kGone:
        emit(it.t, FleetEventKind::kGone, it.slot);
        return down(it.t, it.slot);
      default:
        return;
    }
  }

  void up(double t, uint32_t slot) {
    Slot& s = slots_[slot];
    --pending_ups_;
    s.alive = true;
    s.going = false;
    s.node = slot + out_.slots * s.machines++;
    ++s.token;
    emit(t, FleetEventKind::kUp, slot);
    push(t + s.failures.exponential(node_rate_), Due::kFailure, slot, s.token);
    const double gone = preemption_time(slot, t);
    if (std::isfinite(gone)) {
      s.deadline = gone;
      push(std::max(t, gone - c_.preemption.notice), Due::kNotice, slot, s.token);
      push(gone, Due::kGone, slot, s.token);
    }
  }

  void failure(double t, uint32_t slot) {
    Slot& s = slots_[slot];
    const double u = s.failures.uniform() * cumulative_.back();
    int32_t cause = 0;
    while (cause + 1 < int32_t(cumulative_.size()) && u > cumulative_[cause]) ++cause;
    emit(t, FleetEventKind::kFailure, slot, cause);
    if (out_.causes[cause].replace_node) return down(t, slot);
    push(t + s.failures.exponential(node_rate_), Due::kFailure, slot, s.token);
  }

  void down(double t, uint32_t slot) {
    Slot& s = slots_[slot];
    s.alive = false;
    s.going = false;
    ++s.token;
    if (availability_ && held() + pending_ups_ >= capacity(t)) {
      s.wanting = true;  // the trace allows no machine now; wait for a tick that does
      return;
    }
    ++pending_ups_;
    push(t + c_.costs.node_replacement, Due::kUp, slot, 0);
  }

  // The availability trace: reclaim machines above the capacity, replace below it.
  void tick(double t) {
    const auto& tr = c_.preemption.traces.front();
    const int64_t cap = capacity(t);
    int64_t holding = 0;
    std::vector<uint32_t> candidates;
    for (uint32_t i = 0; i < out_.slots; ++i)
      if (slots_[i].alive && !slots_[i].going) {
        ++holding;
        candidates.push_back(i);
      }
    for (int64_t extra = holding - cap; extra > 0 && !candidates.empty(); --extra) {
      const size_t k = capacity_rng_.below(candidates.size());
      const uint32_t slot = candidates[k];
      candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(k));
      Slot& s = slots_[slot];
      s.going = true;
      s.deadline = t + c_.preemption.notice;
      emit(t, FleetEventKind::kNotice, slot, -1, s.deadline);
      push(s.deadline, Due::kGone, slot, s.token);
    }
    for (uint32_t i = 0; i < out_.slots && held() + pending_ups_ < cap; ++i) {
      if (!slots_[i].wanting) continue;
      slots_[i].wanting = false;
      ++pending_ups_;
      push(t + c_.costs.node_replacement, Due::kUp, i, 0);
    }
    push(t + tr.gap_seconds, Due::kTick, 0, 0);
  }

  int64_t held() const {
    int64_t n = 0;
    for (const Slot& s : slots_) n += s.alive ? 1 : 0;
    return n;
  }
  int64_t capacity(double t) const {
    const auto& tr = c_.preemption.traces.front();
    const auto i =
        (static_cast<size_t>(t / tr.gap_seconds) + size_t(capacity_offset_)) % tr.data.size();
    return tr.data[i];
  }

  // When the machine born at `birth` in `slot` will be preempted (infinity: never).
  double preemption_time(uint32_t slot, double birth) {
    const PreemptionModel& p = c_.preemption;
    Slot& s = slots_[slot];
    if (!p.traces.empty()) {
      if (p.trace_kind == TraceKind::kAvailability) return kNever;
      const SpotTrace& tr = p.traces[slot % p.traces.size()];
      const auto n = static_cast<int64_t>(tr.data.size());
      const auto first = static_cast<int64_t>(birth / tr.gap_seconds);
      for (int64_t j = first; j <= first + n; ++j) {
        if (tr.data[static_cast<size_t>((j + s.trace_offset) % n)] == 0) continue;
        const double at = (double(j) + s.preempt.uniform()) * tr.gap_seconds;
        if (at > birth) return at;
      }
      return kNever;
    }
    if (!p.bathtub && p.hazard <= 0) return kNever;
    return birth + sample_lifetime(p, s.preempt.uniform());
  }

  const FleetConfig& c_;
  FleetTimeline out_;
  std::vector<Slot> slots_;
  std::vector<double> cumulative_;
  double node_rate_ = 0;
  bool availability_ = false;
  int64_t pending_ups_ = 0;
  int64_t capacity_offset_ = 0;  // ticks
  Stream capacity_rng_;
  std::priority_queue<Item, std::vector<Item>, Later> queue_;
  uint64_t seq_ = 0;
};

}  // namespace

FleetTimeline generate_fleet(const FleetConfig& config, uint64_t seed) {
  return Generator(config, seed).run();
}

FleetTimeline quiet_fleet(uint32_t slots) {
  FleetTimeline f;
  f.slots = slots;
  for (uint32_t s = 0; s < slots; ++s) f.events.push_back({0, FleetEventKind::kUp, s, s, -1, 0});
  return f;
}

}  // namespace shardguard::sim
