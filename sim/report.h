// What `shardguard simulate` writes: the table across policies (Markdown, for the terminal
// and table.md), results.json, and two SVG plots written as text (goodput against the
// checkpoint interval with the Young/Daly point marked; badput by cause per policy).
// Pure functions of a SimulationReport; thread-safe.
#pragma once

#include <string>

#include "sim/fleet_config.h"
#include "sim/runner.h"

namespace shardguard::sim {

// Scenario line, then one row per policy: goodput with its 95% CI and badput by cause.
std::string render_table(const FleetConfig& config, const SimulationReport& report);
// The sweep as a table (interval, goodput, CI), with the Young/Daly point and the fitted optimum.
std::string render_sweep(const SimulationReport& report);
std::string render_json(const FleetConfig& config, const SimulationReport& report);

// Goodput (%, with 95% CI bars) against the interval (log scale), the fitted curve, the
// Young/Daly interval and the fitted optimum marked. Empty when there is no sweep.
std::string goodput_vs_interval_svg(const SimulationReport& report);
// One stacked bar per policy: badput by cause as a share of allocated GPU-seconds.
std::string badput_svg(const SimulationReport& report);

// "1h30m"-style text for a number of seconds.
std::string seconds_text(double seconds);

}  // namespace shardguard::sim
