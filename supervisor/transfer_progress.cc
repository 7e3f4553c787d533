#include "supervisor/transfer_progress.h"

#include <cmath>

#include "core/units.h"

namespace shardguard::supervisor {

std::string describe(const TransferSummary& s) {
  std::string out = std::string(hooks::transfer_phase_name(s.phase)) + " of step " +
                    std::to_string(s.step) + ": " + format_size(s.done);
  if (s.total > 0) {
    const uint64_t pct = std::min<uint64_t>(100, s.done * 100 / s.total);
    out += " of " + format_size(s.total) + " (" + std::to_string(pct) + "%)";
  }
  if (s.bytes_per_second > 0)
    out += " at " + format_size(static_cast<uint64_t>(s.bytes_per_second)) + "/s";
  if (s.left) out += ", about " + format_duration(*s.left) + " left";
  return out;
}

std::optional<TransferSummary> TransferProgress::report(uint32_t rank, const hooks::Progress& p,
                                                        SteadyTime now) {
  const auto key = std::make_pair(p.phase, p.step);
  if (key_ != key) {
    reset();
    key_ = key;
    started_ = now;
  }
  ranks_[rank] = p;
  if (now - started_ < kQuiet) return std::nullopt;
  if (last_summary_ && now - *last_summary_ < kEvery) return std::nullopt;
  last_summary_ = now;
  TransferSummary s;
  s.phase = p.phase;
  s.step = p.step;
  for (const auto& [r, rp] : ranks_) {
    s.done += rp.done;
    s.total += rp.total;
  }
  // A rank's first report comes two seconds into its transfer: count from then.
  s.elapsed = now - started_ + std::chrono::seconds(2);
  const double seconds = std::chrono::duration<double>(s.elapsed).count();
  s.bytes_per_second = seconds > 0 ? static_cast<double>(s.done) / seconds : 0;
  if (s.bytes_per_second > 0 && s.total > s.done)
    s.left = std::chrono::duration_cast<Duration>(
        std::chrono::duration<double>(static_cast<double>(s.total - s.done) / s.bytes_per_second));
  else if (s.total > 0 && s.done >= s.total)
    s.left = Duration::zero();
  return s;
}

void TransferProgress::reset() {
  key_.reset();
  ranks_.clear();
  last_summary_.reset();
}

}  // namespace shardguard::supervisor
