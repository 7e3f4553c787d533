// What a rank reports of a training scalar (loss, grad_norm) over the steps since its last
// heartbeat. Heartbeats go out at most every 100 ms, so one heartbeat stands for many steps: it
// carries their first and last step, the last, smallest and largest finite value, and the first
// step that saw a NaN or an infinity (never averaged away). Windows merge, so a node can batch
// the reports of one rank before it forwards them. Plain values; thread-safety: none needed.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>

namespace shardguard {

struct ScalarWindow {
  uint64_t first_step = 0;
  uint64_t last_step = 0;
  uint64_t count = 0;  // finite values folded in
  double last = 0;     // last, min and max of the finite values (0 while count == 0)
  double min = 0;
  double max = 0;
  std::optional<uint64_t> nonfinite_step;  // first step whose value was NaN or +-Inf

  bool empty() const { return count == 0 && !nonfinite_step; }

  // Folds in the value of one step (steps in increasing order).
  void add(uint64_t step, double value) {
    if (empty()) first_step = step;
    first_step = std::min(first_step, step);
    last_step = std::max(last_step, step);
    if (!std::isfinite(value)) {
      if (!nonfinite_step || step < *nonfinite_step) nonfinite_step = step;
      return;
    }
    if (count == 0) {
      min = max = value;
    } else {
      min = std::min(min, value);
      max = std::max(max, value);
    }
    last = value;
    ++count;
  }

  // Folds in a window that came after this one.
  void merge(const ScalarWindow& later) {
    if (later.empty()) return;
    if (empty()) {
      *this = later;
      return;
    }
    first_step = std::min(first_step, later.first_step);
    last_step = std::max(last_step, later.last_step);
    if (later.nonfinite_step && (!nonfinite_step || *later.nonfinite_step < *nonfinite_step))
      nonfinite_step = later.nonfinite_step;
    if (later.count == 0) return;
    if (count == 0) {
      min = later.min;
      max = later.max;
    } else {
      min = std::min(min, later.min);
      max = std::max(max, later.max);
    }
    last = later.last;
    count += later.count;
  }
};

// The scalars a heartbeat may carry. Fixed names keep the socket's messages bounded.
struct StepScalars {
  std::optional<ScalarWindow> loss;
  std::optional<ScalarWindow> grad_norm;

  bool empty() const { return !loss && !grad_norm; }
  std::optional<ScalarWindow>* find(std::string_view name) {
    if (name == "loss") return &loss;
    if (name == "grad_norm") return &grad_norm;
    return nullptr;
  }
  void merge(const StepScalars& later) {
    for (auto [mine, theirs] : {std::pair{&loss, &later.loss}, std::pair{&grad_norm, &later.grad_norm}}) {
      if (!*theirs) continue;
      if (*mine) (*mine)->merge(**theirs);
      else *mine = *theirs;
    }
  }
};

}  // namespace shardguard
