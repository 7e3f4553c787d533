// `shardguard simulate --config fleet.toml [--seed S] [--runs R] [--out DIR]`: the fleet goodput
// simulator (sim/): the real decision core in simulated time against a simulated fleet.
#pragma once

namespace CLI {
class App;
}

namespace shardguard::cli {

void add_simulate_command(CLI::App& app, int* exit_code);

}  // namespace shardguard::cli
