#include "cli/status_json.h"

#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "supervisor/timeline_text.h"

namespace shardguard::cli {
namespace {

using supervisor::TimelineRecord;

// Appends `text` as a JSON string in pure ASCII: every code point from DEL up, and every
// control character, as \uXXXX; bytes that are not UTF-8 as U+FFFD.
void quote(std::string& out, std::string_view text) {
  auto hex4 = [&](uint32_t u) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(u & 0xFFFF));
    out += buf;
  };
  out += '"';
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c == '"')
        out += "\\\"";
      else if (c == '\\')
        out += "\\\\";
      else if (c == '\n')
        out += "\\n";
      else if (c == '\t')
        out += "\\t";
      else if (c == '\r')
        out += "\\r";
      else if (c < 0x20 || c == 0x7f)
        hex4(c);
      else
        out += static_cast<char>(c);
      ++i;
      continue;
    }
    size_t n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
    uint32_t cp = n == 4 ? c & 0x07u : n == 3 ? c & 0x0Fu : c & 0x1Fu;
    bool ok = n != 0 && i + n <= text.size();
    for (size_t k = 1; ok && k < n; ++k) {
      const auto b = static_cast<unsigned char>(text[i + k]);
      ok = (b & 0xC0) == 0x80;
      cp = (cp << 6) | (b & 0x3Fu);
    }
    ok = ok && !(n == 3 && cp < 0x800) && !(n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) &&
         !(cp >= 0xD800 && cp <= 0xDFFF);
    if (!ok) {
      hex4(0xFFFD);
      ++i;
      continue;
    }
    if (cp >= 0x10000) {
      hex4(0xD800 + ((cp - 0x10000) >> 10));
      hex4(0xDC00 + ((cp - 0x10000) & 0x3FF));
    } else {
      hex4(cp);
    }
    i += n;
  }
  out += '"';
}

// A small writer: commas and nesting, values in fixed notation.
class Json {
 public:
  Json& open(char bracket) {
    comma();
    out_ += bracket;
    first_.push_back(true);
    return *this;
  }
  Json& close(char bracket) {
    out_ += bracket;
    first_.pop_back();
    return *this;
  }
  Json& key(std::string_view k) {
    comma();
    quote(out_, k);
    out_ += ':';
    after_key_ = true;
    return *this;
  }
  Json& str(std::string_view v) {
    return raw_value([&] { quote(out_, v); });
  }
  Json& num(double v, int decimals = 6) {
    return raw_value(
        [&] { out_ += std::isfinite(v) ? supervisor::plain_number(v, decimals) : "null"; });
  }
  Json& u64(uint64_t v) {
    return raw_value([&] { out_ += std::to_string(v); });
  }
  Json& i64(int64_t v) {
    return raw_value([&] { out_ += std::to_string(v); });
  }
  Json& boolean(bool v) {
    return raw_value([&] { out_ += v ? "true" : "false"; });
  }
  Json& null() {
    return raw_value([&] { out_ += "null"; });
  }
  template <typename T, typename F>
  Json& opt(const std::optional<T>& v, F write) {
    return v ? write(*v) : null();
  }
  const std::string& text() const { return out_; }

 private:
  void comma() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_.empty()) {
      if (!first_.back()) out_ += ',';
      first_.back() = false;
    }
  }
  template <typename F>
  Json& raw_value(F write) {
    comma();
    write();
    return *this;
  }
  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

void record(Json& j, const TimelineRecord& r) {
  j.open('{').key("time_unix_ms").i64(r.time_unix_ms).key("event").str(r.type);
  for (const auto& f : r.fields) {
    j.key(f.key);
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string>)
            j.str(v);
          else if constexpr (std::is_same_v<T, bool>)
            j.boolean(v);
          else if constexpr (std::is_same_v<T, double>)
            j.num(v, 9);
          else if constexpr (std::is_same_v<T, int64_t>)
            j.i64(v);
          else
            j.u64(v);
        },
        f.value);
  }
  j.close('}');
}

void goodput(Json& j, const policies::GoodputTotals& g) {
  j.open('{').key("ratio").num(g.ratio());
  j.key("allocated_gpu_seconds").num(g.allocated_gpu_seconds, 3);
  j.key("productive_gpu_seconds").num(g.productive_gpu_seconds, 3);
  j.key("badput_gpu_seconds").open('{');
  for (policies::Badput cause : policies::kAllBadput)
    j.key(policies::badput_name(cause)).num(g.badput(cause), 3);
  j.close('}').close('}');
}

void attempt(Json& j, const supervisor::AttemptView& a) {
  auto ms = [&](const std::optional<int64_t>& v) {
    return j.opt(v, [&](int64_t x) -> Json& { return j.i64(x); });
  };
  j.open('{').key("attempt").u64(a.attempt).key("run").u64(a.run).key("nproc").u64(a.nproc);
  j.key("resume_step").opt(a.resume_step, [&](uint64_t s) -> Json& { return j.u64(s); });
  j.key("launch_unix_ms").i64(a.launch_unix_ms);
  j.key("ready_unix_ms");
  ms(a.ready_unix_ms);
  j.key("teardown_unix_ms");
  ms(a.teardown_unix_ms);
  j.key("end_unix_ms");
  ms(a.end_unix_ms);
  j.key("teardown_why").str(a.teardown_why);
  j.key("class").str(a.end_class).key("detail").str(a.end_detail);
  j.key("max_step").u64(a.max_step).key("lost_steps").u64(a.lost_steps);
  j.key("lost_seconds").num(a.lost_seconds, 3);
  j.key("training_seconds").num(a.training_seconds, 3);
  j.key("checkpoint_seconds").num(a.checkpoint_seconds, 3);
  j.key("checkpoints").u64(a.checkpoints);
  j.key("steps_per_second").opt(a.steps_per_second, [&](double v) -> Json& { return j.num(v, 3); });
  j.key("backoff_seconds").opt(a.backoff_seconds, [&](double v) -> Json& { return j.num(v, 3); });
  j.key("restart_reason").str(a.restart_reason).key("gave_up").str(a.gave_up);
  j.close('}');
}

}  // namespace

std::string record_json(const TimelineRecord& r) {
  Json j;
  record(j, r);
  return j.text();
}

std::string status_json(const std::string& run_dir, const RunDirTimeline& loaded,
                        const supervisor::TimelineView& v, size_t timeline_limit) {
  Json j;
  auto u = [&](uint64_t x) -> Json& { return j.u64(x); };
  j.open('{').key("version").u64(1).key("run_dir").str(run_dir);
  j.key("events_path").str(loaded.events_path);
  j.key("state").str(v.state).key("finished").boolean(v.finished);
  j.key("supervisor_alive").boolean(loaded.supervisor_alive);
  j.key("now_unix_ms").i64(loaded.now_unix_ms);
  j.key("first_unix_ms").i64(v.first_unix_ms).key("last_unix_ms").i64(v.last_unix_ms);
  j.key("records").u64(v.records).key("skipped_lines").u64(v.skipped_lines);
  j.key("attempt").opt(v.attempt, u);
  j.key("nproc").u64(v.nproc);
  j.key("step").opt(v.step, u).key("step_source").str(v.step_source);
  j.key("steps_per_second").opt(v.steps_per_second, [&](double x) -> Json& { return j.num(x, 3); });
  j.key("lost_steps").u64(v.lost_steps).key("checkpoints").u64(v.checkpoints);
  j.key("last_checkpoint");
  if (const auto& c = v.last_checkpoint) {
    j.open('{').key("step").u64(c->step).key("time_unix_ms").i64(c->time_unix_ms);
    j.key("age_seconds").num(double(loaded.now_unix_ms - c->time_unix_ms) / 1000.0, 3);
    j.key("attempt").u64(c->attempt).key("seconds").num(c->seconds, 3);
    j.key("manifest").str(c->manifest).key("emergency").boolean(c->emergency);
    j.key("bytes").opt(c->bytes, u).close('}');
  } else {
    j.null();
  }
  j.key("transfer");
  if (const auto& x = v.transfer) {
    j.open('{').key("phase").str(x->phase).key("step").u64(x->step);
    j.key("done_bytes").u64(x->done_bytes).key("total_bytes").u64(x->total_bytes);
    j.key("bytes_per_second").num(x->bytes_per_second, 0);
    j.key("seconds_left").opt(x->seconds_left, [&](double s) -> Json& { return j.num(s, 1); });
    j.key("time_unix_ms").i64(x->time_unix_ms).close('}');
  } else {
    j.null();
  }
  j.key("restarts").open('[');
  for (const auto& r : v.restarts) {
    j.open('{').key("class").str(r.exit_class).key("used").u64(r.used);
    j.key("used_total").u64(r.used_total);
    j.key("max").opt(r.max, [&](uint32_t x) -> Json& { return j.u64(x); });
    j.key("window_seconds").opt(r.window_seconds, [&](double x) -> Json& { return j.num(x, 3); });
    j.key("left").opt(r.left, [&](uint32_t x) -> Json& { return j.u64(x); }).close('}');
  }
  j.close(']').key("notices").open('[');
  for (const auto& n : v.notices) {
    j.open('{').key("time_unix_ms").i64(n.time_unix_ms).key("source").str(n.source);
    j.key("kind").str(n.kind).key("reason").str(n.reason).key("action").str(n.action);
    j.key("preemption").boolean(n.preemption).key("shortened").boolean(n.shortened);
    j.key("seconds_left").opt(n.seconds_left, [&](double x) -> Json& { return j.num(x, 3); });
    j.close('}');
  }
  j.close(']').key("nodes").open('[');
  for (const auto& n : v.nodes) {
    j.open('{').key("node").u64(n.node).key("address").str(n.address).key("state").str(n.state);
    j.key("attempt").opt(n.attempt, [&](uint64_t x) -> Json& { return j.u64(x); });
    j.key("node_rank").opt(n.node_rank, [&](uint32_t x) -> Json& { return j.u64(x); });
    j.key("since_unix_ms").i64(n.since_unix_ms).key("why").str(n.why).close('}');
  }
  j.close(']').key("goodput");
  goodput(j, v.goodput);
  j.key("runs").open('[');
  for (const auto& r : v.runs) {
    j.open('{').key("start_unix_ms").i64(r.start_unix_ms);
    j.key("finish_unix_ms").opt(r.finish_unix_ms, [&](int64_t x) -> Json& { return j.i64(x); });
    j.key("last_unix_ms").i64(r.last_unix_ms).key("job_id").str(r.job_id).key("nproc").u64(r.nproc);
    j.key("state").str(r.final_state);
    j.key("exit_code").opt(r.exit_code, [&](int64_t x) -> Json& { return j.i64(x); });
    j.key("summary").str(r.summary).close('}');
  }
  j.close(']').key("attempts").open('[');
  for (const auto& a : v.attempts) attempt(j, a);
  j.close(']').key("evidence").open('[');
  for (const auto& r : v.evidence) record(j, r);
  j.close(']').key("timeline").open('[');
  const auto& all = loaded.timeline.records();
  const size_t from =
      timeline_limit == 0 || all.size() <= timeline_limit ? 0 : all.size() - timeline_limit;
  for (size_t i = from; i < all.size(); ++i) record(j, all[i]);
  j.close(']').close('}');
  return j.text();
}

}  // namespace shardguard::cli
