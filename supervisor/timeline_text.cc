#include "supervisor/timeline_text.h"

#include <cmath>
#include <cstdio>
#include <ctime>

#include "core/terminal_text.h"
#include "core/units.h"

namespace shardguard::supervisor {
namespace {

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// A number field rendered for people, or `fallback` when it is absent or does not parse.
std::string seconds_field(const TimelineRecord& r, std::string_view key,
                          const std::string& fallback = "?") {
  const auto v = r.number(key);
  return v ? human_seconds(*v) : fallback;
}

std::string count_field(const TimelineRecord& r, std::string_view key) {
  const auto v = r.count(key);
  return v ? std::to_string(*v) : "?";
}

std::string plural(uint64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

std::string batches_text(uint64_t n) {
  return std::to_string(n) + (n == 1 ? " data batch" : " data batches");
}

std::string with_detail(std::string text, const std::string& detail) {
  return detail.empty() ? text : text + ": " + detail;
}

std::string notice_raw(const NoticeView& n) {
  if (n.shortened)
    return "deadline shortened by " + n.reason +
           (n.seconds_left ? ": " + human_seconds(*n.seconds_left) + " left" : "");
  std::string origin = n.source;
  if (!n.kind.empty() && n.kind != n.source) origin += (origin.empty() ? "" : " ") + n.kind;
  std::string s = n.reason.empty() ? origin : n.reason;
  std::string tail = origin;
  if (!n.action.empty()) tail += (tail.empty() ? "" : ", ") + n.action;
  if (n.seconds_left) tail += (tail.empty() ? "" : ", ") + human_seconds(*n.seconds_left) + " left";
  return tail.empty() ? s : s + " (" + tail + ")";
}

NoticeView notice_of(const TimelineRecord& r) {
  NoticeView n;
  n.source = r.text("source");
  n.kind = r.text("kind");
  n.reason = r.text("reason");
  n.action = r.text("action");
  n.seconds_left = r.number("seconds_left");
  return n;
}

std::string generic(const TimelineRecord& r) {
  std::string out;
  for (const auto& f : r.fields) out += (out.empty() ? "" : " ") + f.key + "=" + r.text(f.key);
  return out;
}

std::string describe_raw(const TimelineRecord& r) {
  const std::string& t = r.type;
  const std::string attempt = "attempt " + count_field(r, "attempt");
  if (t == "start")
    return "job " + r.text("job_id") + ", " + plural(r.count("nproc").value_or(0), "rank") +
           ", first attempt " + count_field(r, "first_attempt");
  if (t == "node_joined")
    return "node " + count_field(r, "node") + " joined (" + count_field(r, "nodes") + " now)";
  if (t == "node_released")
    return "node " + count_field(r, "node") + " leaves the job (" + r.text("why") +
           "): its shardguard run exits, the others go on";
  if (t == "node_lost")
    return "node " + count_field(r, "node") + " lost: " + r.text("why") + " (" +
           count_field(r, "nodes") + " left)";
  if (t == "launch") {
    const auto resume = r.count("resume_step");
    std::string s = attempt + ": " + plural(r.count("nproc").value_or(0), "rank") + ", " +
                    (resume ? "resuming from step " + std::to_string(*resume) : std::string("fresh start"));
    if (auto skip = r.count("skip_batches"); skip && *skip > 0)
      s += ", skipping " + batches_text(*skip) + " (SHARDGUARD_SKIP_BATCHES)";
    return s;
  }
  if (t == "launch_failed")
    return attempt + ": launch failed on node " + count_field(r, "node") + ": " + r.text("error") +
           (r.flag("transient").value_or(false) ? " (transient)" : "");
  if (t == "hello")
    return attempt + ": rank " + count_field(r, "rank") + " connected (pid " + r.text("pid") + ")";
  if (t == "ranks_ready")
    return attempt + ": every rank heartbeating, " + seconds_field(r, "seconds_since_launch") +
           " after the launch";
  if (t == "checkpoint_now") {
    std::string s = r.text("kind") + " checkpoint of step " + count_field(r, "at_step") +
                    " requested (" + r.text("reason") + ")";
    if (auto left = r.number("seconds_left")) s += ", " + human_seconds(*left) + " left";
    return with_detail(s, r.text("note"));
  }
  if (t == "checkpoint_committed") {
    std::string s =
        "step " + count_field(r, "step") + " committed in " + seconds_field(r, "seconds");
    if (auto bytes = r.count("bytes")) s += ", " + format_size(*bytes);
    return s;
  }
  if (t == "checkpoint_failed")
    return "rank " + count_field(r, "rank") + " could not save step " + count_field(r, "step") +
           ": " + r.text("error");
  if (t == "transfer_progress") {
    std::string s = r.text("phase") + " of step " + count_field(r, "step") + ": " +
                    format_size(r.count("done_bytes").value_or(0));
    if (auto total = r.count("total_bytes"); total && *total > 0)
      s += " of " + format_size(*total) + " (" +
           std::to_string(std::min<uint64_t>(100, r.count("done_bytes").value_or(0) * 100 / *total)) +
           "%)";
    if (auto rate = r.number("bytes_per_second"); rate && *rate > 0)
      s += " at " + format_size(static_cast<uint64_t>(*rate)) + "/s";
    if (auto left = r.number("seconds_left")) s += ", about " + human_seconds(*left) + " left";
    return s;
  }
  if (t == "stale_commit")
    return "commit of step " + count_field(r, "step") + " by an older " + attempt + " ignored";
  if (t == "notice") return notice_raw(notice_of(r));
  if (t == "deadline_shortened")
    return "deadline shortened (" + r.text("reason") + "): " + seconds_field(r, "seconds_left") +
           " left";
  if (t == "node_unhealthy")
    return "node " + count_field(r, "node") + " unhealthy: " + r.text("evidence");
  if (t == "hang")
    return "rank " + count_field(r, "rank") + " hung at step " + count_field(r, "step") +
           " (no heartbeat for " + seconds_field(r, "seconds_since_heartbeat") + ")";
  if (t == "hang_report")
    return "rank " + count_field(r, "rank") + ": what it was doing is in " + r.text("report");
  if (t == "teardown") return attempt + ": teardown: " + r.text("why");
  if (t == "rank_exit")
    return attempt + ": rank " + count_field(r, "rank") + " " + r.text("status") +
           (r.flag("killed_by_us").value_or(false) ? " (stopped by the supervisor)" : "");
  if (t == "attempt_end") {
    std::string s = attempt + " ended: " + r.text("class");
    if (const std::string d = r.text("detail"); !d.empty()) s += " (" + d + ")";
    s += " after " + seconds_field(r, "seconds") + ", step " + count_field(r, "max_step");
    if (auto lost = r.count("lost_steps"); lost && *lost > 0)
      s += ", " + plural(*lost, "step") + " lost";
    return s;
  }
  if (t == "backoff")
    return with_detail("restart in " + seconds_field(r, "seconds"), r.text("why"));
  if (t == "waiting_for_nodes")
    return "waiting for nodes: " + count_field(r, "nodes") + " of the " +
           count_field(r, "min_nodes") + " needed";
  if (t == "adopt" && r.count("last_committed"))
    return "took the job over from its record (attempt " + count_field(r, "attempt") +
           ", last committed step " + count_field(r, "last_committed") + ")";
  if (t == "shrink")
    return "continuing on " + plural(r.count("nodes").value_or(0), "node") + ": " + r.text("why");
  if (t == "give_up") return "gave up (" + r.text("class") + "): " + r.text("why");
  if (t == "finish") {
    std::string s = "run " + r.text("state");
    if (auto code = r.number("exit_code")) s += ", exit " + fixed(*code, 0);
    return with_detail(s, r.text("summary"));
  }
  if (t == "resume_skipped")
    return "resume skips step " + count_field(r, "step") + " (" + r.text("state") + ")" +
           (r.text("why").empty() ? "" : ": " + r.text("why"));
  if (t == "resume_failed")
    return "rank " + count_field(r, "rank") + " could not resume from " + r.text("manifest") +
           " (" + r.text("file") + " at offset " + count_field(r, "offset") +
           "): " + r.text("error");
  if (t == "quarantined")
    return "step " + count_field(r, "step") + " set aside in " + r.text("path") + ": " +
           r.text("reason");
  if (t == "quarantine_failed")
    return "could not set step " + count_field(r, "step") + " aside: " + r.text("error");
  if (t == "divergence") {
    const std::string action = r.text("action");
    const std::string what = action == "give_up"             ? "giving up"
                             : action == "roll_back_further" ? "rolling back further"
                                                             : "rolling back";
    std::string s = attempt + ": divergence, " + r.text("what");
    if (r.text("rule") == "spike")
      s += " (" + plain_number(r.number("value").value_or(0), 4) + " against a median of " +
           plain_number(r.number("median").value_or(0), 4) + ")";
    return s + "; " + what + ", checkpoints from step " + count_field(r, "quarantine_from") +
           " set aside";
  }
  if (t == "guard_rollback") {
    const auto to = r.count("to_step");
    std::string s = attempt + ": rolled back to " +
                    (to ? "step " + std::to_string(*to) : std::string("a fresh start")) +
                    " (steps from " + count_field(r, "suspect_from") + " are suspect)";
    if (auto skip = r.count("skip_batches"); skip && *skip > 0)
      s += ", skipping " + batches_text(*skip) + " after it";
    return s;
  }
  if (t == "guard_recovered")
    return "step " + count_field(r, "step") + " committed past the anomaly at step " +
           count_field(r, "anomaly_step") + ": the divergence guard's count starts again";
  if (t == "implausible_step")
    return "rank " + count_field(r, "rank") + " reported step " + count_field(r, "step") +
           " after " + count_field(r, "previous") + ": ignored";
  return generic(r);
}

}  // namespace

std::string plain_number(double v, int decimals) {
  if (!std::isfinite(v)) return "0";
  std::string s = fixed(v, decimals);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

std::string human_seconds(double s) {
  if (!std::isfinite(s)) return "?";
  const char* sign = s < 0 ? "-" : "";
  const double a = std::fabs(s);
  if (a < 1) return sign + fixed(a * 1000, 0) + " ms";
  if (a < 60) return sign + fixed(a, 1) + " s";
  if (a < 3600) return sign + fixed(a / 60, 1) + " min";
  if (a < 3 * 86400) return sign + fixed(a / 3600, 1) + " h";
  return sign + fixed(a / 86400, 1) + " d";
}

std::string human_gpu_seconds(double g) {
  if (!std::isfinite(g)) return "?";
  const double a = std::fabs(g);
  if (a < 60) return fixed(g, 1) + " GPU-s";
  if (a < 3600) return fixed(g / 60, 1) + " GPU-min";
  return fixed(g / 3600, 1) + " GPU-h";
}

std::string percent(double ratio) {
  return fixed(std::isfinite(ratio) ? ratio * 100 : 0, 1) + " %";
}

std::string utc_time(int64_t unix_ms) {
  const std::time_t secs =
      static_cast<std::time_t>(unix_ms >= 0 ? unix_ms / 1000 : (unix_ms - 999) / 1000);
  const int ms = static_cast<int>(unix_ms - int64_t(secs) * 1000);
  std::tm tm{};
  if (gmtime_r(&secs, &tm) == nullptr) return "?";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d %02d:%02d:%02d.%03d", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  return buf;
}

std::string describe_notice(const NoticeView& notice) {
  return escape_for_terminal(notice_raw(notice));
}

std::string describe_record(const TimelineRecord& record) {
  return escape_for_terminal(describe_raw(record));
}

}  // namespace shardguard::supervisor
