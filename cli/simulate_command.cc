// `shardguard simulate`: reads a fleet config, runs every policy over the seeds and the
// interval sweep, prints the table across policies and the sweep, and with --out writes
// table.md, results.json, goodput_vs_interval.svg and badput.svg there.
#include "cli/simulate_command.h"

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "core/exit_codes.h"
#include "core/filesystem.h"
#include "sim/fleet_config.h"
#include "sim/report.h"
#include "sim/runner.h"

namespace shardguard::cli {
namespace {

struct SimulateFlags {
  std::string config;
  uint64_t seed = 0;
  bool seed_set = false;
  uint32_t runs = 0;
  std::string out;
  bool no_sweep = false;
  bool check_config = false;
};

Status write_outputs(const std::string& dir, const sim::FleetConfig& cfg,
                     const sim::SimulationReport& rep) {
  Filesystem& fs = PosixFilesystem::instance();
  SG_RETURN_IF_ERROR(fs.create_dirs(dir));
  SG_RETURN_IF_ERROR(atomic_write_file(
      fs, dir + "/table.md", sim::render_table(cfg, rep) + "\n" + sim::render_sweep(rep)));
  SG_RETURN_IF_ERROR(atomic_write_file(fs, dir + "/results.json", sim::render_json(cfg, rep)));
  SG_RETURN_IF_ERROR(atomic_write_file(fs, dir + "/badput.svg", sim::badput_svg(rep)));
  if (rep.sweep)
    SG_RETURN_IF_ERROR(
        atomic_write_file(fs, dir + "/goodput_vs_interval.svg", sim::goodput_vs_interval_svg(rep)));
  return ok_status();
}

int simulate(const SimulateFlags& f) {
  auto cfg = sim::load_fleet_config(f.config);
  if (!cfg.ok()) {
    std::fprintf(stderr, "shardguard simulate: %s\n", cfg.error().message().c_str());
    return cfg.error().code() == ErrorCode::kInvalid ? kExitUsage : kExitFailure;
  }
  if (f.check_config) {
    std::printf("%s: ok (%zu policies)\n", f.config.c_str(), cfg->policies.size());
    return kExitOk;
  }
  sim::RunnerOptions o;
  o.runs = f.runs;
  if (f.seed_set) o.seed = f.seed;
  o.sweep = !f.no_sweep;
  o.progress = [](std::string_view line) { spdlog::info("simulate: {}", line); };
  const sim::SimulationReport rep = sim::run_simulation(*cfg, o);
  std::printf("%s\n%s", sim::render_table(*cfg, rep).c_str(), sim::render_sweep(rep).c_str());
  std::printf("\n(%u runs of %s each, %.1f s)\n", rep.runs, sim::seconds_text(rep.duration).c_str(),
              rep.wall_seconds);
  if (!f.out.empty()) {
    if (auto st = write_outputs(f.out, *cfg, rep); !st.ok()) {
      std::fprintf(stderr, "shardguard simulate: %s\n", st.error().message().c_str());
      return kExitFailure;
    }
    std::printf("wrote %s/{table.md,results.json,badput.svg%s}\n", f.out.c_str(),
                rep.sweep ? ",goodput_vs_interval.svg" : "");
  }
  return kExitOk;
}

}  // namespace

void add_simulate_command(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<SimulateFlags>();
  auto* cmd = app.add_subcommand(
      "simulate",
      "Simulate a job on a fleet with failures and preemptions: goodput per policy, badput by "
      "cause, goodput against the checkpoint interval (the real decision core, simulated time)");
  cmd->add_option("--config", flags->config, "fleet TOML file (see examples/simulate/fleet.toml)")
      ->required();
  cmd->add_option("--seed", flags->seed, "first seed (default: the config's)")
      ->each([flags](const std::string&) { flags->seed_set = true; });
  cmd->add_option("--runs", flags->runs, "seeds per policy and per sweep point")
      ->check(CLI::Range(1u, 100000u));
  cmd->add_option("--out", flags->out, "directory for table.md, results.json and the SVG plots");
  cmd->add_flag("--no-sweep", flags->no_sweep, "skip goodput against the checkpoint interval");
  cmd->add_flag("--check-config", flags->check_config, "check the config and exit");
  cmd->callback([flags, exit_code] { *exit_code = simulate(*flags); });
}

}  // namespace shardguard::cli
