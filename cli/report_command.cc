#include "cli/report_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <memory>

#include "cli/run_dir_timeline.h"
#include "core/exit_codes.h"
#include "core/terminal_text.h"
#include "core/units.h"
#include "supervisor/timeline_text.h"

namespace shardguard::cli {
namespace {

using supervisor::human_gpu_seconds;
using supervisor::human_seconds;
using supervisor::percent;
using supervisor::TimelineRecord;
using supervisor::TimelineView;
using supervisor::utc_time;

constexpr size_t kHangReportLines = 20;
constexpr size_t kHangReportBytes = 4096;

// Text from a file as Markdown text: visible control characters (core/terminal_text.h), and
// no character that could open a table cell, a link, emphasis, a heading or HTML.
std::string md(const std::string& text) {
  std::string out;
  for (char c : escape_for_terminal(text)) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '\\':
      case '|':
      case '[':
      case ']':
      case '*':
      case '_':
      case '`':
      case '#':
      case '!':
        out += '\\';
        out += c;
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string fixed3(double v) { return supervisor::plain_number(v, 3); }

std::string share(double part, double whole) { return percent(whole > 0 ? part / whole : 0); }

void summary(std::string& out, const TimelineView& v, int64_t now_ms, bool live) {
  const auto& g = v.goodput;
  out += "## Summary\n\n| | |\n|---|---|\n";
  auto row = [&](const std::string& k, const std::string& val) {
    out += "| " + k + " | " + val + " |\n";
  };
  std::string outcome = md(v.state);
  if (!v.runs.empty()) {
    const auto& run = v.runs.back();
    if (run.exit_code) outcome += " (exit " + std::to_string(*run.exit_code) + ")";
    if (!run.summary.empty()) outcome += ": " + md(run.summary);
  }
  row("Outcome", outcome);
  row("Runs and attempts",
      std::to_string(v.runs.size()) + " run(s), " + std::to_string(v.attempts.size()) +
          " attempt(s), " + utc_time(v.first_unix_ms) + " to " + utc_time(v.last_unix_ms) +
          " UTC (" + human_seconds(double(v.last_unix_ms - v.first_unix_ms) / 1000.0) + ")");
  std::string steps = v.step ? std::to_string(*v.step) : std::string("unknown");
  if (v.steps_per_second)
    steps += ", " + supervisor::plain_number(*v.steps_per_second, 2) + " steps/s while training";
  row("Step reached", steps);
  if (v.last_checkpoint) {
    const auto& c = *v.last_checkpoint;
    const auto& bytes = c.bytes;
    row("Last committed checkpoint",
        "step " + std::to_string(c.step) + " at " + utc_time(c.time_unix_ms) + " UTC (" +
            human_seconds(double(now_ms - c.time_unix_ms) / 1000.0) +
            (live ? " ago)" : " before the last record)") + (c.emergency ? ", emergency" : "") +
            (bytes ? ", " + format_size(*bytes) : ""));
  } else {
    row("Last committed checkpoint", "none");
  }
  double lost_seconds = 0;
  for (const auto& a : v.attempts) lost_seconds += a.lost_seconds;
  row("Lost steps",
      std::to_string(v.lost_steps) +
          (v.lost_steps ? " (about " + human_seconds(lost_seconds) + " of training redone)" : ""));
  std::string restarts;
  for (const auto& r : v.restarts) {
    if (r.used_total == 0) continue;
    restarts +=
        (restarts.empty() ? "" : ", ") + md(r.exit_class) + " " + std::to_string(r.used_total);
    if (r.left && r.max)
      restarts += " (" + std::to_string(*r.left) + " of " + std::to_string(*r.max) + " left)";
  }
  row("Restarts", restarts.empty() ? "none" : restarts);
  row("Notices", std::to_string(v.notices.size()));
  row("**Goodput**", "**" + percent(g.ratio()) + "**: productive " +
                         human_gpu_seconds(g.productive_gpu_seconds) + " of " +
                         human_gpu_seconds(g.allocated_gpu_seconds) + " allocated");
  out += "\n";
}

void lost_time(std::string& out, const TimelineView& v) {
  const auto& g = v.goodput;
  out +=
      "## Lost time by cause\n\nGPU-seconds: allocated GPUs x seconds (goodput = productive / "
      "allocated).\n\n| cause | GPU-seconds | share | what it is |\n|---|---:|---:|---|\n";
  auto row = [&](const std::string& cause, double value, const std::string& what) {
    out += "| " + cause + " | " + fixed3(value) + " | " + share(value, g.allocated_gpu_seconds) +
           " | " + what + " |\n";
  };
  row("allocated", g.allocated_gpu_seconds, "from each run's start to its finish");
  row("productive", g.productive_gpu_seconds, "training steps that were kept");
  row("recompute", g.badput(policies::Badput::kRecompute), "steps computed, lost, and redone");
  row("restart", g.badput(policies::Badput::kRestart),
      "stopping, backing off, launching and loading: ranks not training");
  row("checkpoint", g.badput(policies::Badput::kCheckpoint), "the training loop stalled for saves");
  row("waiting", g.badput(policies::Badput::kWaiting), "waiting for nodes");
  out += "\n";
}

void restarts(std::string& out, const TimelineView& v) {
  out +=
      "## Attempts and the causes of each restart\n\n"
      "| attempt | ranks | resumed from | ran | ended | class | cause | lost steps | then |\n"
      "|---:|---:|---|---|---|---|---|---|---|\n";
  for (const auto& a : v.attempts) {
    const std::string ran = a.end_unix_ms
                                ? human_seconds(double(*a.end_unix_ms - a.launch_unix_ms) / 1000.0)
                                : "running";
    std::string cause = a.end_detail.empty() ? a.teardown_why : a.end_detail;
    std::string then =
        a.backoff_seconds ? "restart after " + human_seconds(*a.backoff_seconds) : std::string();
    if (!a.gave_up.empty()) then = "gave up: " + md(a.gave_up);
    // The last attempt of a finished run: the run's own end.
    const auto& run = v.runs[std::min(a.run, v.runs.size() - 1)];
    const bool last_of_run = &a == &v.attempts.back() || (&a + 1)->run != a.run;
    if (then.empty() && last_of_run && run.finish_unix_ms)
      then = "run " + md(run.final_state) +
             (run.exit_code ? " (exit " + std::to_string(*run.exit_code) + ")" : "");
    out += "| " + std::to_string(a.attempt) + " | " + std::to_string(a.nproc) + " | " +
           (a.resume_step ? "step " + std::to_string(*a.resume_step) : std::string("fresh start")) +
           " | " + ran + " | " + (a.end_unix_ms ? utc_time(*a.end_unix_ms) : std::string("-")) +
           " | " + md(a.end_class) + " | " + md(cause) + " | " + std::to_string(a.lost_steps) +
           (a.lost_steps ? " (" + human_seconds(a.lost_seconds) + ")" : "") + " | " + then + " |\n";
  }
  out += "\n";
}

// Consecutive commits, and consecutive hellos, are one row each: one page, not one per save.
void timeline(std::string& out, const std::vector<TimelineRecord>& records, int64_t first_ms) {
  out += "## Timeline\n\n| time (UTC) | elapsed | event | details |\n|---|---:|---|---|\n";
  auto row = [&](const TimelineRecord& r, const std::string& event, const std::string& details) {
    out += "| " + utc_time(r.time_unix_ms) + " | " +
           human_seconds(double(r.time_unix_ms - first_ms) / 1000.0) + " | " + event + " | " +
           details + " |\n";
  };
  for (size_t i = 0; i < records.size();) {
    const TimelineRecord& r = records[i];
    size_t j = i + 1;
    if (r.type == "checkpoint_committed" || r.type == "hello")
      while (j < records.size() && records[j].type == r.type) ++j;
    if (j - i > 1 && r.type == "hello") {
      row(r, "hello", std::to_string(j - i) + " ranks connected");
    } else if (j - i > 1) {
      const TimelineRecord& last = records[j - 1];
      row(r, md(r.type),
          std::to_string(j - i) + " checkpoints committed, steps " + md(r.text("step")) + " to " +
              md(last.text("step")) + " (the last at " + utc_time(last.time_unix_ms) + ")");
    } else {
      row(r, md(r.type), md(supervisor::describe_record(r)));
    }
    i = j;
  }
  out += "\n";
}

void hang_report(std::string& out, const TimelineRecord& r) {
  const std::string path = r.text("report");
  out += "#### Rank " + md(r.text("rank")) + ", attempt " + md(r.text("attempt")) + ": " +
         md(path) + "\n\n";
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    out += "(the report file cannot be read any more)\n\n";
    return;
  }
  std::string line;
  size_t lines = 0, bytes = 0;
  while (lines < kHangReportLines && bytes < kHangReportBytes && std::getline(in, line)) {
    std::string shown = line.substr(0, kHangReportBytes - bytes);
    // A code block shows tabs as they are; every other control character is made visible.
    for (size_t tab; (tab = shown.find('\t')) != std::string::npos;) shown.replace(tab, 1, "    ");
    out += "    " + escape_for_terminal(shown) + "\n";
    bytes += line.size() + 1;
    ++lines;
  }
  if (in && in.peek() != EOF) out += "    ...\n";
  out += "\n";
}

void evidence(std::string& out, const TimelineView& v) {
  out += "## Evidence\n\n### Notices\n\n";
  if (v.notices.empty()) out += "None.\n";
  for (const auto& n : v.notices) {
    out += "- " + utc_time(n.time_unix_ms) + " UTC, from **" + md(n.source) + "**" +
           (n.preemption ? " (a preemption)" : "") + ": " + md(supervisor::describe_notice(n)) +
           "\n";
  }
  auto section = [&](const char* title, std::initializer_list<std::string_view> types) {
    std::string body;
    for (const auto& r : v.evidence)
      for (auto t : types)
        if (r.type == t)
          body += "- " + utc_time(r.time_unix_ms) + " UTC, " + md(r.type) + ": " +
                  md(supervisor::describe_record(r)) + "\n";
    out += std::string("\n### ") + title + "\n\n" + (body.empty() ? "None.\n" : body);
  };
  out += "\n### Hang reports\n\n";
  bool any_hang = false;
  for (const auto& r : v.evidence)
    if (r.type == "hang_report") {
      hang_report(out, r);
      any_hang = true;
    }
  if (!any_hang) out += "None.\n";
  section("Hangs", {"hang"});
  section("Node health (XIDs, GPUs, disk, lost nodes)", {"node_unhealthy", "node_lost"});
  section("Checkpoint problems",
          {"checkpoint_failed", "resume_failed", "resume_skipped", "quarantined",
           "quarantine_failed", "stale_commit", "commit_claim_rejected"});
  section("Divergence (loss / gradient norm anomalies and rollbacks)",
          {"divergence", "guard_rollback", "guard_recovered"});
  section("Other", {"launch_failed", "give_up", "implausible_step"});
}

struct ReportArgs {
  std::string run_dir;
  std::string config;
};

int report(const ReportArgs& a) {
  supervisor::RestartBudgets budgets;
  if (!a.config.empty()) {
    auto b = budgets_from_config(a.config);
    if (!b.ok()) {
      std::fprintf(stderr, "shardguard report: %s\n", b.error().message().c_str());
      return kExitUsage;
    }
    budgets = std::move(*b);
  }
  auto loaded = load_run_dir(a.run_dir, budgets);
  if (!loaded.ok()) {
    std::fprintf(stderr, "shardguard report: no timeline in '%s': %s\n",
                 escape_for_terminal(a.run_dir).c_str(), loaded.error().message().c_str());
    return kExitFailure;
  }
  TimelineView v = loaded->timeline.view(loaded->now_unix_ms);
  if (v.last_checkpoint && !v.last_checkpoint->bytes)
    v.last_checkpoint->bytes = manifest_bytes(v.last_checkpoint->manifest);
  const std::string job = v.runs.empty() ? "" : v.runs.back().job_id;
  std::string out = "# Incident report: job " + (job.empty() ? std::string("?") : md(job)) + "\n\n";
  out += "Generated " + utc_time(to_unix_ms(RealClock::instance().wall_now())) +
         " UTC by `shardguard report` from " + md(loaded->events_path) + ": " +
         std::to_string(v.records) + " records" +
         (v.skipped_lines ? ", " + std::to_string(v.skipped_lines) + " malformed line(s) skipped"
                          : "") +
         (v.finished                 ? "."
          : loaded->supervisor_alive ? "; the run is still going."
                                     : "; no supervisor answers and the run "
                                       "recorded no finish.") +
         "\n\n";
  summary(out, v, loaded->now_unix_ms, loaded->supervisor_alive && !v.finished);
  lost_time(out, v);
  restarts(out, v);
  timeline(out, loaded->timeline.records(), v.first_unix_ms);
  evidence(out, v);
  std::fputs(out.c_str(), stdout);
  return kExitOk;
}

}  // namespace

void add_report_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<ReportArgs>();
  auto* cmd = app.add_subcommand(
      "report", "A one-page Markdown incident report of a run dir, for a postmortem");
  cmd->add_option("--run-dir", a->run_dir, "the run directory of `shardguard run`")->required();
  cmd->add_option("--config", a->config, "the job's config: shows the restarts left per class");
  cmd->callback([a, exit_code] { *exit_code = report(*a); });
}

}  // namespace shardguard::cli
