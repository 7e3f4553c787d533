// `shardguard report --run-dir R [--config job.toml]`: a one-page Markdown incident report of a
// run dir to paste into a postmortem - summary with goodput, lost time by cause, each restart
// and its cause, the timeline, and the evidence (notices, hang reports, node health, checkpoint
// problems). Everything that came from a file is escaped.
#pragma once

namespace CLI {
class App;
}

namespace shardguard::cli {

void add_report_command(CLI::App& app, int* exit_code);

}  // namespace shardguard::cli
