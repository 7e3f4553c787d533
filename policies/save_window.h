// Does an emergency checkpoint fit the notice it gets? The window is the shortest lead any
// notice source of this run gives before the machine goes: the [stop] grace (the budget on
// SIGTERM/SIGINT), each watched cloud's preemption notice (AWS 2 minutes, GCP and Azure
// 30 s), and under Slurm the --signal lead, less the [stop] safety_margin by which the ranks
// must be done (the time they really get). A save measured at more than half of it warns,
// so a user learns at start-up or after the first checkpoint - not at the first preemption -
// that the emergency save will not make it. The supervisor calls check_save_window() at
// start (with the resume checkpoint's save time or an estimate) and after each commit, and
// logs the warning, records it as an event and exports `fraction` as a metric.
// Pure: no I/O, no clock; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/result.h"

namespace shardguard::policies {

enum class Cloud { kAws, kGcp, kAzure };

// What each provider documents as the time from its notice to the machine's stop.
Duration cloud_notice_lead(Cloud cloud);
std::string_view cloud_name(Cloud cloud);  // "AWS", "GCP", "Azure"

// The clouds an [agent] clouds setting watches: "none" -> {}, "aws"/"gcp"/"azure" -> that
// one, "auto" -> all three (until detection says which one this is, the shortest counts).
// kInvalid names any other value.
Result<std::vector<Cloud>> clouds_from_setting(std::string_view clouds);

struct SaveWindowInputs {
  Duration stop_grace{0};                     // [stop] grace
  std::vector<Cloud> clouds;                  // watched clouds
  std::optional<Duration> slurm_signal_lead;  // set when Slurm sends --signal=SIG@lead
  // [stop] safety_margin: the ranks must be done this long before the deadline, so a save
  // gets the lead less this.
  Duration safety_margin{0};
};

struct SaveWindow {
  Duration window{0};  // what the ranks get: the shortest lead less the safety margin (>= 0)
  Duration lead{0};    // the shortest lead itself
  std::string source;  // what sets it: "[stop] grace", "GCP notice", "Slurm --signal lead"
};

// The shortest of the inputs' leads, less the safety margin.
SaveWindow shortest_save_window(const SaveWindowInputs& in);

struct SaveWindowCheck {
  SaveWindow window;
  double fraction = 0;                 // save / window (infinity for an empty window)
  std::optional<std::string> warning;  // when fraction > 0.5: one line for log and event
};

// `save` is the measured duration of a save (begin to commit). Warns when it is more than
// half of the window, naming both, the window's source and what would help.
SaveWindowCheck check_save_window(const SaveWindowInputs& in, Duration save);

}  // namespace shardguard::policies
