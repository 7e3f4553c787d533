#include "policies/save_window.h"

#include <cstdio>
#include <limits>

#include "core/units.h"

namespace shardguard::policies {

using namespace std::chrono_literals;

Duration cloud_notice_lead(Cloud cloud) {
  switch (cloud) {
    case Cloud::kAws:
      return 120s;  // spot instance interruption notice
    case Cloud::kGcp:
      return 30s;  // preemption / Spot VM termination
    case Cloud::kAzure:
      return 30s;  // Scheduled Events "Preempt" NotBefore
  }
  return 30s;
}

std::string_view cloud_name(Cloud cloud) {
  switch (cloud) {
    case Cloud::kAws:
      return "AWS";
    case Cloud::kGcp:
      return "GCP";
    case Cloud::kAzure:
      return "Azure";
  }
  return "cloud";
}

Result<std::vector<Cloud>> clouds_from_setting(std::string_view clouds) {
  if (clouds == "none") return std::vector<Cloud>{};
  if (clouds == "aws") return std::vector<Cloud>{Cloud::kAws};
  if (clouds == "gcp") return std::vector<Cloud>{Cloud::kGcp};
  if (clouds == "azure") return std::vector<Cloud>{Cloud::kAzure};
  if (clouds == "auto") return std::vector<Cloud>{Cloud::kAws, Cloud::kGcp, Cloud::kAzure};
  return Error(ErrorCode::kInvalid,
               "clouds = '" + std::string(clouds) + "': expected none, auto, aws, gcp or azure");
}

SaveWindow shortest_save_window(const SaveWindowInputs& in) {
  struct Lead {
    Duration window;
    std::string source;
  } w{in.stop_grace, "[stop] grace"};
  for (Cloud c : in.clouds)
    if (cloud_notice_lead(c) < w.window)
      w = {cloud_notice_lead(c), std::string(cloud_name(c)) + " notice"};
  if (in.slurm_signal_lead && *in.slurm_signal_lead < w.window)
    w = {*in.slurm_signal_lead, "Slurm --signal lead"};
  return {std::max(Duration{0}, w.window - in.safety_margin), w.window, std::move(w.source)};
}

SaveWindowCheck check_save_window(const SaveWindowInputs& in, Duration save) {
  SaveWindowCheck c;
  c.window = shortest_save_window(in);
  const double window_s = std::chrono::duration<double>(c.window.window).count();
  const double save_s = std::chrono::duration<double>(save).count();
  c.fraction = window_s > 0 ? save_s / window_s : std::numeric_limits<double>::infinity();
  if (c.fraction <= 0.5) return c;
  char pct[32];
  if (window_s > 0)
    std::snprintf(pct, sizeof pct, "%.0f%%", c.fraction * 100);
  else
    std::snprintf(pct, sizeof pct, "all");
  std::string hint = c.window.source == "[stop] grace" ? "raise [stop] grace, or make saves faster"
                     : c.window.source == "Slurm --signal lead"
                         ? "signal earlier (sbatch --signal=SIG@SECONDS), or make saves faster"
                         : "make saves faster (fewer bytes per node, faster storage) or checkpoint "
                           "often enough that losing the emergency save costs little";
  std::string margin;
  if (c.window.lead != c.window.window)
    margin = " (" + format_duration(c.window.lead) + " less the " +
             format_duration(c.window.lead - c.window.window) + " [stop] safety_margin)";
  c.warning = "an emergency checkpoint may not fit its window: a save takes " +
              format_duration(save) + ", " + pct + " of the " + format_duration(c.window.window) +
              " the " + c.window.source + " leaves the ranks" + margin +
              " (keep it under half): " + hint;
  return c;
}

}  // namespace shardguard::policies
