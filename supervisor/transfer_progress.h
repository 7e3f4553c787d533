// A long save's or resume's progress over one node's ranks, from their `progress` reports
// (hooks/protocol.h): each rank's latest report summed, and, every 5 s of a transfer that has
// run 3 s or more, a summary for the log and the timeline (`transfer_progress`): bytes done
// of the total, the rate since it began and the time left at that rate. A report of another
// step or phase starts a new transfer.
// Thread-safety: loop thread only; time is an argument.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "core/clock.h"
#include "hooks/protocol.h"

namespace shardguard::supervisor {

struct TransferSummary {
  hooks::TransferPhase phase = hooks::TransferPhase::kSave;
  uint64_t step = 0;
  uint64_t done = 0;
  uint64_t total = 0;
  double bytes_per_second = 0;
  std::optional<Duration> left;  // nullopt: no rate yet, or the total is unknown
  Duration elapsed{};
};

// "save of step 200: 1.2 GiB of 4.0 GiB (30%) at 180 MiB/s, about 15s left"
std::string describe(const TransferSummary& s);

class TransferProgress {
 public:
  static constexpr Duration kQuiet = std::chrono::seconds(3);   // no word before this
  static constexpr Duration kEvery = std::chrono::seconds(5);   // then at most this often

  // A rank's report at `now`; the summary when one is due.
  std::optional<TransferSummary> report(uint32_t rank, const hooks::Progress& p, SteadyTime now);
  // The transfer is over (committed, failed, a new epoch): the next report starts afresh.
  void reset();

 private:
  std::optional<std::pair<hooks::TransferPhase, uint64_t>> key_;
  std::map<uint32_t, hooks::Progress> ranks_;
  SteadyTime started_{};
  std::optional<SteadyTime> last_summary_;
};

}  // namespace shardguard::supervisor
