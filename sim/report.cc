#include "sim/report.h"

#include <boost/json.hpp>
#include <cmath>
#include <cstdio>

#include "core/units.h"

namespace shardguard::sim {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string pct(const Estimate& e) {
  return fmt("%.2f", 100 * e.mean) + " ± " + fmt("%.2f", 100 * e.half_width);
}

std::string interval_text(const Policy& p) {
  switch (p.interval) {
    case policies::IntervalMode::kTime:
      return "every " + seconds_text(p.every);
    case policies::IntervalMode::kAuto:
      return "auto (Young/Daly)";
    case policies::IntervalMode::kSteps:
      return p.every_steps ? "every " + std::to_string(p.every_steps) + " steps" : "none";
  }
  return "";
}

}  // namespace

std::string seconds_text(double s) {
  if (!std::isfinite(s)) return "never";
  return format_duration(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(std::round(s * 10) / 10)));
}

std::string render_table(const FleetConfig& c, const SimulationReport& r) {
  std::string out;
  out += "Scenario: " + std::to_string(c.job.nodes) + " nodes x " +
         std::to_string(c.job.gpus_per_node) + " GPUs, " + seconds_text(r.duration) + " x " +
         std::to_string(r.runs) + " seeds (from " + std::to_string(r.seed) + "); state " +
         fmt("%.0f", c.calibration.state_bytes / 1e9) + " GB, save " + fmt("%.1f", r.save_seconds) +
         " s (loop stall " + fmt("%.2f", r.stall_seconds) + " s), load " +
         fmt("%.1f", r.load_seconds) + " s; failures every " + seconds_text(r.job_mtbf) +
         "; preemptions " + std::string(cloud_name(c.preemption.cloud)) + ", " +
         seconds_text(c.preemption.notice) + " notice.\n\n";
  out +=
      "| policy | checkpoints | notices | min nodes | goodput % (95% CI) | recompute % | "
      "restart % | checkpoint % | waiting % | ckpts/run | lost steps/run |\n";
  out += "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const PolicySummary& s : r.policies) {
    const Policy& p = s.policy;
    out += "| " + p.name + " | " + interval_text(p) + " | " +
           (p.emergency ? "emergency checkpoint" : "ignored") + " | " +
           std::to_string(p.min_nodes ? p.min_nodes : c.job.nodes) + " | " + pct(s.goodput);
    for (const Estimate& b : s.badput) out += " | " + fmt("%.2f", 100 * b.mean);
    out += " | " + fmt("%.0f", s.checkpoints) + " | " + fmt("%.0f", s.lost_steps) + " |\n";
  }
  return out;
}

std::string render_sweep(const SimulationReport& r) {
  if (!r.sweep) return "";
  const SweepSummary& s = *r.sweep;
  std::string out = "Goodput against the checkpoint interval (" + s.base +
                    ", interval = time):\n\n| interval | goodput % (95% CI) |\n| --- | --- |\n";
  for (const SweepPoint& p : s.points)
    out += "| " + seconds_text(p.interval) + " | " + pct(p.goodput) + " |\n";
  out += "\nYoung/Daly point (what `auto` starts from): " + seconds_text(s.young_daly) + "\n";
  if (s.optimum)
    out += std::string("Fitted optimum: ") + seconds_text(s.optimum->x) + " (goodput " +
           fmt("%.2f", 100 * s.optimum->y) + "%)" +
           (s.optimum->interior ? "" : " - at the edge of the range: no optimum inside it") + "\n";
  return out;
}

std::string render_json(const FleetConfig& c, const SimulationReport& r) {
  namespace json = boost::json;
  auto est = [](const Estimate& e) {
    return json::object{{"mean", e.mean}, {"ci95", e.half_width}, {"stddev", e.stddev}, {"n", e.n}};
  };
  json::object root;
  root["scenario"] =
      json::object{{"source", c.source},
                   {"nodes", c.job.nodes},
                   {"gpus_per_node", c.job.gpus_per_node},
                   {"duration_seconds", r.duration},
                   {"runs", r.runs},
                   {"seed", r.seed},
                   {"state_bytes", c.calibration.state_bytes},
                   {"save_seconds", r.save_seconds},
                   {"stall_seconds", r.stall_seconds},
                   {"load_seconds", r.load_seconds},
                   {"failure_mtbf_seconds", std::isfinite(r.job_mtbf) ? r.job_mtbf : -1},
                   {"cloud", std::string(cloud_name(c.preemption.cloud))},
                   {"notice_seconds", c.preemption.notice}};
  json::array pols;
  for (const PolicySummary& s : r.policies) {
    json::object b;
    for (size_t i = 0; i < s.badput.size(); ++i)
      b[std::string(policies::badput_name(static_cast<policies::Badput>(i)))] = est(s.badput[i]);
    pols.push_back(json::object{{"name", s.policy.name},
                                {"goodput", est(s.goodput)},
                                {"badput", std::move(b)},
                                {"per_run", json::object{{"failures_hit", s.failures_hit},
                                                         {"preemptions", s.preemptions},
                                                         {"notices", s.notices},
                                                         {"emergency_commits", s.emergency_commits},
                                                         {"checkpoints", s.checkpoints},
                                                         {"attempts", s.attempts},
                                                         {"runs_of_shardguard", s.machines},
                                                         {"give_ups", s.give_ups},
                                                         {"lost_steps", s.lost_steps},
                                                         {"machine_events", s.machine_events},
                                                         {"simulator_events", s.sim_events}}}});
  }
  root["policies"] = std::move(pols);
  if (r.sweep) {
    json::array pts;
    for (const SweepPoint& p : r.sweep->points)
      pts.push_back(json::object{{"interval_seconds", p.interval}, {"goodput", est(p.goodput)}});
    json::object sw{{"policy", r.sweep->base},
                    {"young_daly_seconds", r.sweep->young_daly},
                    {"points", std::move(pts)}};
    if (r.sweep->optimum)
      sw["fitted_optimum"] = json::object{{"interval_seconds", r.sweep->optimum->x},
                                          {"goodput", r.sweep->optimum->y},
                                          {"interior", r.sweep->optimum->interior}};
    root["sweep"] = std::move(sw);
  }
  root["wall_seconds"] = r.wall_seconds;
  return json::serialize(root) + "\n";
}

}  // namespace shardguard::sim
