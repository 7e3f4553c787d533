#include "examples/trainer_cuda/snapshot_stats.h"

#include <algorithm>
#include <cstdio>

namespace shardguard::example {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

void SnapshotStats::began(uint64_t step, uint64_t bytes, double start_seconds) {
  snapshots_.push_back({step, step + 1, bytes, start_seconds, 0, false});
}

void SnapshotStats::handed_over(uint64_t step, double copy_seconds) {
  for (auto it = snapshots_.rbegin(); it != snapshots_.rend(); ++it)
    if (!it->handed) {
      it->handed = true;
      it->end = std::max(it->end, step + 1);
      it->copy_seconds = copy_seconds;
      return;
    }
}

std::string SnapshotStats::report(const std::string& mode) const {
  if (snapshots_.empty()) return "";
  std::vector<double> outside;
  for (const auto& [step, s] : step_seconds_) {
    const bool inside = std::any_of(snapshots_.begin(), snapshots_.end(), [&](const Snapshot& w) {
      return step >= w.begin && step <= w.end;
    });
    if (!inside) outside.push_back(s);
  }
  const double base = median(outside);
  std::vector<double> stalls, copies;
  for (const auto& w : snapshots_) {
    double extra = 0;
    for (auto it = step_seconds_.lower_bound(w.begin);
         it != step_seconds_.end() && it->first <= w.end; ++it)
      extra += it->second - base;
    stalls.push_back(std::max(0.0, extra));
    if (w.handed) copies.push_back(w.copy_seconds);
  }
  const double first = stalls.front();
  std::vector<double> later(stalls.begin() + 1, stalls.end());
  const double gib = snapshots_.front().bytes / double(1ull << 30);
  const double copy = median(copies);
  char line[512];
  std::snprintf(line, sizeof line,
                "snapshot stall (%s): %zu checkpoints of %.2f GiB: first %.1f ms, later median "
                "%.1f ms (max %.1f ms); start() median %.2f ms; device->host copy median %.1f ms "
                "(%.1f GB/s); median step %.2f ms",
                mode.c_str(), snapshots_.size(), gib, first * 1e3, median(later) * 1e3,
                later.empty() ? 0.0 : *std::max_element(later.begin(), later.end()) * 1e3,
                median([&] {
                  std::vector<double> v;
                  for (const auto& w : snapshots_) v.push_back(w.start_seconds);
                  return v;
                }()) *
                    1e3,
                copy * 1e3, copy > 0 ? snapshots_.front().bytes / copy / 1e9 : 0.0, base * 1e3);
  return line;
}

}  // namespace shardguard::example
