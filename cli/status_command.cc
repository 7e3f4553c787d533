// `shardguard status --run-dir R [--config job.toml] [--json] [--follow] [--lines N]`: the run
// at a glance for the engineer on call - state, step and rate, the last committed checkpoint
// and its age, lost steps, restarts left per class, notices, goodput and badput by cause - and
// the timeline in human units. `--json` is the machine form (cli/status_json.h); `--follow`
// then streams the records appended to events.jsonl until SIGINT/SIGTERM or --follow-for.
// Everything that came from a file is escaped for the terminal.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <memory>

#include "cli/run_command.h"
#include "cli/run_dir_timeline.h"
#include "cli/status_json.h"
#include "core/exit_codes.h"
#include "core/filesystem.h"
#include "core/terminal_text.h"
#include "core/units.h"
#include "supervisor/timeline_text.h"

namespace shardguard::cli {
namespace {

using supervisor::human_seconds;
using supervisor::TimelineRecord;
using supervisor::TimelineView;

struct StatusArgs {
  std::string run_dir;
  std::string config;
  bool json = false;
  bool follow = false;
  size_t lines = 40;
  std::string follow_for = "24h";
  std::string poll = "250ms";
};

volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_stop_signal(int) { g_stop = 1; }

// SIGINT and SIGTERM end a --follow; the previous handlers come back when it returns.
class StopSignals {
 public:
  StopSignals() {
    g_stop = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: the sleep returns at once
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  // Filled by sigaction() in the constructor.
  struct sigaction old_int_;
  struct sigaction old_term_;
};

std::string esc(const std::string& s) { return escape_for_terminal(s); }

std::string ago(int64_t now_ms, int64_t then_ms) {
  return human_seconds(double(now_ms - then_ms) / 1000.0) + " ago";
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

std::string timeline_row(const TimelineRecord& r, int64_t first_ms) {
  return pad(supervisor::utc_time(r.time_unix_ms), 23) + "  " +
         pad(human_seconds(double(r.time_unix_ms - first_ms) / 1000.0), 10) + "  " +
         pad(esc(r.type), 20) + "  " + supervisor::describe_record(r) + "\n";
}

std::string state_line(const RunDirTimeline& loaded, const TimelineView& v) {
  std::string s = esc(v.state);  // a finish record's state is text from the file
  if (v.attempt && !v.finished)
    s += " - attempt " + std::to_string(*v.attempt) + ", " + std::to_string(v.nproc) + " rank(s)";
  if (!v.finished) {
    s += loaded.supervisor_alive
             ? " - supervisor answering"
             : " - NO supervisor answers in the run dir (stopped without a finish record?)";
  } else if (!v.runs.empty()) {
    const auto& run = v.runs.back();
    if (run.exit_code) s += " (exit " + std::to_string(*run.exit_code) + ")";
    if (!run.summary.empty()) s += ": " + esc(run.summary);
  }
  const int64_t wall = to_unix_ms(RealClock::instance().wall_now());
  return s + " - last record " + ago(wall, v.last_unix_ms);
}

std::string step_line(const TimelineView& v) {
  if (!v.step) return "unknown";
  std::string s = std::to_string(*v.step);
  if (v.step_source == "checkpoint")
    s += " (as of the last checkpoint)";
  else if (v.step_source == "resume")
    s += " (resumed from; no checkpoint yet in this attempt)";
  else if (!v.step_source.empty())
    s += " (at the " + v.step_source + ")";
  if (v.steps_per_second)
    s += " - " + supervisor::plain_number(*v.steps_per_second, 2) + " steps/s while training";
  return s;
}

// A long save or resume in flight: bytes done of the total, the rate, the time left.
std::string transfer_line(const supervisor::TransferView& x) {
  std::string s = x.phase + " of step " + std::to_string(x.step) + ": " + format_size(x.done_bytes);
  if (x.total_bytes > 0)
    s += " of " + format_size(x.total_bytes) + " (" +
         std::to_string(std::min<uint64_t>(100, x.done_bytes * 100 / x.total_bytes)) + "%)";
  if (x.bytes_per_second > 0)
    s += " at " + format_size(static_cast<uint64_t>(x.bytes_per_second)) + "/s";
  if (x.seconds_left) s += ", about " + human_seconds(*x.seconds_left) + " left";
  const int64_t wall = to_unix_ms(RealClock::instance().wall_now());
  return s + " (as of " + ago(wall, x.time_unix_ms) + ")";
}

std::string checkpoint_line(const TimelineView& v) {
  if (!v.last_checkpoint) return "none committed";
  const auto& c = *v.last_checkpoint;
  const int64_t wall = to_unix_ms(RealClock::instance().wall_now());
  std::string s = "step " + std::to_string(c.step) + ", committed " + ago(wall, c.time_unix_ms) +
                  " (" + supervisor::utc_time(c.time_unix_ms) + " UTC) in " +
                  human_seconds(c.seconds);
  if (c.emergency) s += ", emergency";
  if (c.bytes) s += ", " + format_size(*c.bytes);
  return s + " - " + std::to_string(v.checkpoints) + " committed in all";
}

// Classes that restarted, one per line; the untouched budgets on one line.
std::string restarts_line(const TimelineView& v) {
  std::string used, unused;
  for (const auto& r : v.restarts) {
    std::string budget;
    if (r.left && r.max && r.window_seconds)
      budget = std::to_string(*r.left) + " of " + std::to_string(*r.max) + " left per " +
               human_seconds(*r.window_seconds);
    if (r.used_total == 0) {
      unused += (unused.empty() ? "" : ", ") + esc(r.exit_class);
      if (r.max && r.window_seconds)
        unused += " (" + std::to_string(*r.max) + " per " + human_seconds(*r.window_seconds) + ")";
      continue;
    }
    if (!used.empty()) used += "\n               ";
    used += esc(r.exit_class) + ": " + std::to_string(r.used) + " used";
    if (r.used_total != r.used) used += " (" + std::to_string(r.used_total) + " over all runs)";
    if (!budget.empty()) used += ", " + budget;
  }
  if (used.empty()) used = "none";
  if (!unused.empty()) used += "\n               none yet: " + unused;
  return used;
}

std::string notices_lines(const TimelineView& v) {
  if (v.notices.empty()) return "none";
  std::string s;
  for (const auto& n : v.notices) {
    if (!s.empty()) s += "\n               ";
    s += supervisor::utc_time(n.time_unix_ms) + "  " + supervisor::describe_notice(n);
  }
  return s;
}

// One line per node of a multi-node job: where it is placed, or why it is not.
std::string nodes_lines(const TimelineView& v) {
  const int64_t wall = to_unix_ms(RealClock::instance().wall_now());
  std::string s;
  for (const auto& n : v.nodes) {
    if (!s.empty()) s += "\n               ";
    s += "node " + std::to_string(n.node);
    if (!n.address.empty()) s += " (" + esc(n.address) + ")";
    s += ": " + n.state;
    if (n.state == "running" && n.node_rank && n.attempt)
      s += " as node rank " + std::to_string(*n.node_rank) + " of attempt " +
           std::to_string(*n.attempt);
    else if (n.attempt)
      s += " (last placed in attempt " + std::to_string(*n.attempt) + ")";
    s += ", since " + ago(wall, n.since_unix_ms);
    if (!n.why.empty()) s += ": " + esc(n.why);
  }
  return s;
}

std::string goodput_lines(const TimelineView& v) {
  const auto& g = v.goodput;
  std::string s = supervisor::percent(g.ratio()) + " - productive " +
                  supervisor::human_gpu_seconds(g.productive_gpu_seconds) + " of " +
                  supervisor::human_gpu_seconds(g.allocated_gpu_seconds) + " allocated";
  s += "\n  badput       ";
  bool first = true;
  for (policies::Badput cause : policies::kAllBadput) {
    if (!first) s += " - ";
    first = false;
    const double share =
        g.allocated_gpu_seconds > 0 ? g.badput(cause) / g.allocated_gpu_seconds : 0;
    s += std::string(policies::badput_name(cause)) + " " + supervisor::percent(share) + " (" +
         supervisor::human_gpu_seconds(g.badput(cause)) + ")";
  }
  return s;
}

std::string page(const StatusArgs& a, const RunDirTimeline& loaded, const TimelineView& v) {
  std::string job = v.runs.empty() ? "" : v.runs.back().job_id;
  std::string out =
      "job " + (job.empty() ? std::string("?") : esc(job)) + " - run dir " + esc(a.run_dir) + "\n";
  auto row = [&](const char* label, const std::string& text) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "  %-12s ", label);
    out += buf + text + "\n";
  };
  row("state", state_line(loaded, v));
  row("step", step_line(v));
  row("checkpoint", checkpoint_line(v));
  if (v.transfer) row("in progress", transfer_line(*v.transfer));
  uint64_t attempts_losing = 0;
  double lost_seconds = 0;
  for (const auto& at : v.attempts) {
    attempts_losing += at.lost_steps > 0 ? 1 : 0;
    lost_seconds += at.lost_seconds;
  }
  row("lost steps",
      std::to_string(v.lost_steps) +
          (v.lost_steps ? " in " + std::to_string(attempts_losing) + " attempt(s), about " +
                              human_seconds(lost_seconds) + " of training redone"
                        : ""));
  row("restarts", restarts_line(v) + (a.config.empty() && !v.restarts.empty()
                                          ? "  (--config job.toml shows what is left)"
                                          : ""));
  row("notices", notices_lines(v));
  if (v.nodes.size() > 1) row("nodes", nodes_lines(v));
  row("goodput", goodput_lines(v));
  row("runs",
      std::to_string(v.runs.size()) + ", " + std::to_string(v.attempts.size()) + " attempt(s), " +
          std::to_string(v.records) + " records" +
          (v.skipped_lines ? ", " + std::to_string(v.skipped_lines) + " malformed line(s) skipped"
                           : ""));
  const auto& records = loaded.timeline.records();
  const size_t from = a.lines == 0 || records.size() <= a.lines ? 0 : records.size() - a.lines;
  out += "\ntimeline";
  if (from > 0)
    out += " (last " + std::to_string(records.size() - from) + " of " +
           std::to_string(records.size()) + "; --lines 0 shows all)";
  out += "\n" + pad("TIME (UTC)", 23) + "  " + pad("ELAPSED", 10) + "  " + pad("EVENT", 20) +
         "  DETAILS\n";
  for (size_t i = from; i < records.size(); ++i) out += timeline_row(records[i], v.first_unix_ms);
  return out;
}

int follow(const StatusArgs& a, const RunDirTimeline& loaded, int64_t first_ms) {
  auto limit = parse_duration(a.follow_for);
  auto poll = parse_duration(a.poll);
  if (!limit.ok() || !poll.ok()) {
    std::fprintf(stderr, "shardguard status: %s\n",
                 (!limit.ok() ? limit.error() : poll.error()).message().c_str());
    return kExitUsage;
  }
  StopSignals signals;
  EventsTail tail(loaded.events_path, loaded.bytes_read);
  const auto until = std::chrono::steady_clock::now() + *limit;
  while (g_stop == 0 && std::chrono::steady_clock::now() < until) {
    auto lines = tail.poll();
    if (!lines.ok()) {
      std::fprintf(stderr, "shardguard status: %s\n", lines.error().message().c_str());
      return kExitFailure;
    }
    if (tail.restarted() && !a.json)
      std::printf("-- events.jsonl was replaced; reading it again\n");
    for (const auto& line : *lines) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto r = supervisor::parse_timeline_line(line);
      if (!r) {
        if (!a.json) std::printf("-- a malformed line was skipped\n");
        continue;
      }
      if (first_ms == 0) first_ms = r->time_unix_ms;
      std::fputs(a.json ? (record_json(*r) + "\n").c_str() : timeline_row(*r, first_ms).c_str(),
                 stdout);
    }
    std::fflush(stdout);
    const auto step = std::chrono::duration_cast<std::chrono::nanoseconds>(*poll);
    timespec ts{static_cast<time_t>(step.count() / 1'000'000'000),
                static_cast<long>(step.count() % 1'000'000'000)};
    ::nanosleep(&ts, nullptr);  // a signal ends it early
  }
  return kExitOk;
}

int status(const StatusArgs& a) {
  supervisor::RestartBudgets budgets;
  if (!a.config.empty()) {
    auto b = budgets_from_config(a.config);
    if (!b.ok()) {
      std::fprintf(stderr, "shardguard status: %s\n", b.error().message().c_str());
      return kExitUsage;
    }
    budgets = std::move(*b);
  }
  auto loaded = load_run_dir(a.run_dir, budgets);
  if (!loaded.ok() && a.follow && loaded.error().code() == ErrorCode::kNotFound) {
    // Following a run that has not begun yet: its records will come.
    std::printf("waiting for '%s'\n", esc(join_path(a.run_dir, "events.jsonl")).c_str());
    std::fflush(stdout);
    return follow(a, empty_run_dir(a.run_dir), 0);
  }
  if (!loaded.ok()) {
    std::fprintf(stderr, "shardguard status: no timeline in '%s': %s\n", esc(a.run_dir).c_str(),
                 loaded.error().message().c_str());
    return kExitFailure;
  }
  TimelineView v = loaded->timeline.view(loaded->now_unix_ms);
  if (v.last_checkpoint && !v.last_checkpoint->bytes)
    v.last_checkpoint->bytes = manifest_bytes(v.last_checkpoint->manifest);
  if (a.json) {
    std::printf("%s\n", status_json(a.run_dir, *loaded, v, a.lines).c_str());
  } else if (v.records == 0) {
    std::printf("no events yet in '%s'\n", esc(loaded->events_path).c_str());
  } else {
    std::fputs(page(a, *loaded, v).c_str(), stdout);
  }
  std::fflush(stdout);
  return a.follow ? follow(a, *loaded, v.first_unix_ms) : kExitOk;
}

}  // namespace

void add_status_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<StatusArgs>();
  auto* cmd = app.add_subcommand(
      "status",
      "A run at a glance: state, step, last checkpoint, lost steps, restarts left, "
      "notices, goodput, and the timeline");
  cmd->add_option("--run-dir", a->run_dir, "the run directory of `shardguard run`")->required();
  cmd->add_option("--config", a->config, "the job's config: shows the restarts left per class");
  cmd->add_flag("--json", a->json, "the machine form (one JSON object; see cli/status_json.h)");
  cmd->add_flag("--follow", a->follow,
                "then print records as they are appended, until Ctrl-C or --follow-for");
  cmd->add_option("--lines", a->lines, "timeline records shown (0: all)")->capture_default_str();
  cmd->add_option("--follow-for", a->follow_for, "stop following after this long")
      ->capture_default_str();
  cmd->add_option("--poll", a->poll, "how often --follow looks for new records")
      ->capture_default_str();
  cmd->callback([a, exit_code] { *exit_code = status(*a); });
}

}  // namespace shardguard::cli
