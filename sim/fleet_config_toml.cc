// fleet.toml, read strictly: unknown keys and bad values are errors naming the file, line and
// key, all reported at once. Sections: [simulation] [job] [storage] [costs] [restart]
// [failures] [preemption] [[policy]] [sweep]; examples/simulate/fleet.toml documents each key.
#include <toml++/toml.h>

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <set>
#include <sstream>

#include "core/open_regular.h"
#include "core/units.h"
#include "sim/fleet_config.h"

namespace shardguard::sim {
namespace {

class Problems {
 public:
  explicit Problems(std::string source) : source_(std::move(source)) {}
  void add(uint32_t line, std::string_view key, std::string_view what) {
    text_ += (text_.empty() ? "" : "\n") + source_ + ":" + std::to_string(line) + ": " +
             std::string(key) + ": " + std::string(what);
  }
  Status status() const {
    return text_.empty() ? ok_status() : Status(Error(ErrorCode::kInvalid, text_));
  }

 private:
  std::string source_, text_;
};

// One table: each getter marks its key known and stores a valid value; finish() reports the
// keys nobody asked for.
class Section {
 public:
  Section(const toml::table* t, std::string path, Problems& p)
      : t_(t), path_(std::move(path)), p_(p) {}

  const toml::node* get(std::string_view key) {
    known_.insert(std::string(key));
    return t_ ? t_->get(key) : nullptr;
  }
  void bad(const toml::node& n, std::string_view key, std::string_view what) {
    p_.add(n.source().begin.line, path_ + "." + std::string(key), what);
  }
  bool expect(const toml::node& n, std::string_view key, bool ok, std::string_view wanted) {
    if (!ok) bad(n, key, "expected " + std::string(wanted));
    return ok;
  }
  const toml::node* string(std::string_view key, std::string& out) {
    const toml::node* n = get(key);
    if (!n || !expect(*n, key, n->is_string(), "a string")) return nullptr;
    out = n->as_string()->get();
    return n;
  }
  void boolean(std::string_view key, bool& out) {
    const toml::node* n = get(key);
    if (n && expect(*n, key, n->is_boolean(), "true or false")) out = n->as_boolean()->get();
  }
  template <typename Int>
  void integer(std::string_view key, Int& out, int64_t lo, int64_t hi) {
    const toml::node* n = get(key);
    if (!n || !expect(*n, key, n->is_integer(), "an integer")) return;
    const int64_t v = n->as_integer()->get();
    if (v < lo || v > hi)
      return bad(*n, key, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    out = static_cast<Int>(v);
  }
  bool number(std::string_view key, double& out, double lo, double hi) {
    const toml::node* n = get(key);
    if (!n || !expect(*n, key, n->is_number(), "a number")) return false;
    const double v =
        n->is_integer() ? double(n->as_integer()->get()) : n->as_floating_point()->get();
    if (!(v >= lo && v <= hi)) {
      std::ostringstream s;
      s << "must be between " << lo << " and " << hi << ", got " << v;
      bad(*n, key, s.str());
      return false;
    }
    out = v;
    return true;
  }
  // A duration string ("30s", "2h", "30d") in seconds; `zero_ok`: "0" is allowed.
  bool seconds(std::string_view key, double& out, bool zero_ok = true) {
    const toml::node* n = get(key);
    return n && parse_seconds(*n, key, out, zero_ok);
  }
  bool parse_seconds(const toml::node& n, std::string_view key, double& out, bool zero_ok) {
    if (!expect(n, key, n.is_string(), "a duration string like \"30s\"")) return false;
    auto d = parse_duration(n.as_string()->get());
    if (!d.ok()) return bad(n, key, d.error().message()), false;
    const double s = std::chrono::duration<double>(*d).count();
    if (s < 0 || (!zero_ok && s == 0)) return bad(n, key, "must be greater than 0"), false;
    out = s;
    return true;
  }
  void optional_seconds(std::string_view key, std::optional<double>& out) {
    double s = 0;
    if (seconds(key, s)) out = s;
  }
  // A size ("980GB", "1.5TiB") in bytes.
  void bytes(std::string_view key, double& out) {
    const toml::node* n = get(key);
    if (!n || !expect(*n, key, n->is_string(), "a size string like \"980GB\"")) return;
    auto b = parse_size(n->as_string()->get());
    if (!b.ok()) return bad(*n, key, b.error().message());
    if (*b == 0) return bad(*n, key, "must be greater than 0");
    out = double(*b);
  }
  // A bandwidth ("5GB/s") in bytes per second.
  void bandwidth(std::string_view key, double& out) {
    const toml::node* n = get(key);
    if (!n || !expect(*n, key, n->is_string(), "a bandwidth string like \"5GB/s\"")) return;
    std::string text = n->as_string()->get();
    if (text.size() < 3 || text.substr(text.size() - 2) != "/s")
      return bad(*n, key, "expected a bandwidth string like \"5GB/s\", got \"" + text + "\"");
    auto b = parse_size(text.substr(0, text.size() - 2));
    if (!b.ok()) return bad(*n, key, b.error().message());
    if (*b == 0) return bad(*n, key, "must be greater than 0");
    out = double(*b);
  }
  template <typename E>
  void choice(std::string_view key, E& out, std::initializer_list<std::pair<const char*, E>> opts) {
    std::string v;
    const toml::node* n = string(key, v);
    if (!n) return;
    std::string names;
    for (const auto& [name, value] : opts) {
      if (v == name) return void(out = value);
      names += (names.empty() ? "\"" : ", \"") + std::string(name) + "\"";
    }
    bad(*n, key, "expected one of " + names + ", got \"" + v + "\"");
  }
  void finish() {
    if (!t_) return;
    for (const auto& [key, node] : *t_)
      if (!known_.contains(std::string(key.str())))
        p_.add(key.source().begin.line, path_ + "." + std::string(key.str()), "unknown key");
  }

 private:
  const toml::table* t_;
  std::string path_;
  Problems& p_;
  std::set<std::string> known_;
};

std::string resolve(const std::string& base_dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || base_dir.empty()) return path;
  return (std::filesystem::path(base_dir) / path).string();
}

void read_simulation(Section s, FleetConfig& c) {
  s.seconds("duration", c.duration, false);
  s.integer("runs", c.runs, 1, 100000);
  s.integer("seed", c.seed, 0, INT64_MAX);
  s.finish();
}

// Beyond the largest training fleets (100k GPUs are 12,500 nodes of 8), and what keeps a
// simulation's memory bounded: a million nodes ran the machine out of memory.
constexpr int64_t kMaxNodes = 65536;

void read_job(Section s, FleetConfig& c) {
  s.integer("nodes", c.job.nodes, 1, kMaxNodes);
  s.integer("gpus_per_node", c.job.gpus_per_node, 1, 1024);
  s.seconds("step_time", c.job.step_seconds, false);
  s.boolean("independent_ranks", c.job.independent_ranks);
  s.bytes("state_size", c.calibration.state_bytes);
  double params = 0, bytes_per = 14;
  const bool have_params = s.number("params", params, 1, 1e15);
  s.number("bytes_per_param", bytes_per, 0.1, 1024);
  if (have_params) c.calibration.state_bytes = params * bytes_per;
  s.finish();
}

void read_storage(Section s, FleetConfig& c, const std::string& base_dir) {
  std::string calibration;
  if (const toml::node* n = s.string("calibration", calibration)) {
    Status st = read_calibration_json(resolve(base_dir, calibration), c.calibration);
    if (!st.ok()) s.bad(*n, "calibration", st.error().message());
  }
  Calibration& k = c.calibration;
  double gbps = 0;
  if (s.number("save_gbps_per_node", gbps, 1e-6, 1e6)) k.save_per_node = gbps * 1e9;
  if (s.number("load_gbps_per_node", gbps, 1e-6, 1e6)) k.load_per_node = gbps * 1e9;
  s.bandwidth("write_per_node", k.save_per_node);
  s.bandwidth("read_per_node", k.load_per_node);
  s.bandwidth("aggregate_write", k.aggregate_write);
  s.bandwidth("aggregate_read", k.aggregate_read);
  s.number("snapshot_seconds_per_gib", k.snapshot_seconds_per_gib, 0, 1e6);
  s.seconds("commit", k.commit_seconds);
  s.boolean("async", k.async_save);
  s.optional_seconds("save", k.save_seconds);
  s.optional_seconds("load", k.load_seconds);
  s.optional_seconds("stall", k.stall_seconds);
  s.finish();
}

void read_costs(Section s, FleetConfig& c) {
  CostModel& k = c.costs;
  s.seconds("launch", k.launch);
  s.seconds("rendezvous", k.rendezvous);
  s.seconds("teardown", k.teardown);
  s.seconds("rank_exit", k.rank_exit);
  s.seconds("resume_scan", k.resume_scan);
  s.seconds("commit_readback", k.commit_readback);
  s.seconds("node_loss_detection", k.node_loss_detection);
  s.seconds("heartbeat_interval", k.heartbeat_interval);
  s.seconds("node_replacement", k.node_replacement);
  s.seconds("give_up_restart", k.give_up_restart);
  // The scheduler names the requeue delay's default; `requeue` overrides it.
  if (const toml::node* n = s.string("scheduler", k.scheduler)) {
    if (k.scheduler == "slurm")
      k.requeue = 60;
    else if (k.scheduler == "kubernetes")
      k.requeue = 30;
    else if (k.scheduler == "none")
      k.requeue = 0;
    else
      s.bad(*n, "scheduler", "expected one of \"slurm\", \"kubernetes\", \"none\"");
  }
  s.seconds("requeue", k.requeue);
  s.integer("spare_nodes", k.spare_nodes, 0, kMaxNodes);
  s.finish();
}

void read_restart(Section s, FleetConfig& c) {
  RestartSettings& r = c.restart;
  s.seconds("backoff_initial", r.backoff_initial);
  s.seconds("backoff_max", r.backoff_max);
  s.number("backoff_multiplier", r.backoff_multiplier, 1, 100);
  s.number("backoff_jitter", r.backoff_jitter, 0, 1);
  s.seconds("healthy_after", r.healthy_after);
  s.integer("no_progress_limit", r.no_progress_limit, 0, 1000000);
  s.boolean("unlimited_budgets", r.unlimited_budgets);
  s.seconds("hang_timeout", r.hang_timeout);
  s.seconds("rendezvous_timeout", r.rendezvous_timeout, false);
  s.seconds("request_latency", r.request_latency);
  s.seconds("safety_margin", r.safety_margin);
  s.finish();
}

void read_failures(Section s, FleetConfig& c) {
  FailureModel& f = c.failures;
  s.choice("model", f.kind,
           {{"llama3", FailureModel::Kind::kLlama3},
            {"exponential", FailureModel::Kind::kExponential},
            {"none", FailureModel::Kind::kNone}});
  s.number("scale", f.scale, 0, 1e6);
  double mtbf = 0;
  const bool have_mtbf = s.seconds("mtbf", mtbf, false);
  const double gpus = double(c.job.nodes) * c.job.gpus_per_node;
  if (f.kind == FailureModel::Kind::kExponential) {
    f = exponential_failures(have_mtbf ? mtbf : job_mtbf_seconds(FailureModel{}, uint64_t(gpus)),
                             uint64_t(gpus));
  } else if (have_mtbf) {
    f.per_gpu_rate = 1.0 / (mtbf * gpus);  // the job's MTBF at its size (before `scale`)
  }
  s.finish();
}

void read_preemption(Section s, FleetConfig& c, const std::string& base_dir) {
  PreemptionModel& p = c.preemption;
  s.choice("cloud", p.cloud,
           {{"none", Cloud::kNone},
            {"aws", Cloud::kAws},
            {"gcp", Cloud::kGcp},
            {"azure", Cloud::kAzure}});
  p.notice = default_notice_seconds(p.cloud);
  if (p.cloud == Cloud::kNone) p.hazard = 0;
  s.seconds("notice", p.notice);
  double prob = 0;
  if (s.number("rate_per_day", prob, 0, 0.999999)) p.hazard = hazard_from_probability(prob, 86400);
  if (s.number("rate_per_month", prob, 0, 0.999999))
    p.hazard = hazard_from_probability(prob, 30 * 86400.0);
  std::string bucket;
  if (const toml::node* n = s.string("aws_bucket", bucket)) {
    auto b = aws_bucket_probability(bucket);
    if (!b.ok())
      s.bad(*n, "aws_bucket", b.error().message());
    else
      p.hazard = hazard_from_probability(*b, 30 * 86400.0);
  }
  bool bathtub = false;
  s.boolean("bathtub", bathtub);
  Bathtub shape;
  s.number("bathtub_a", shape.a, 0, 1);
  s.seconds("bathtub_tau1", shape.tau1, false);
  s.seconds("bathtub_tau2", shape.tau2, false);
  s.seconds("bathtub_max_lifetime", shape.b, false);
  if (bathtub) p.bathtub = shape;
  if (const toml::node* n = s.get("traces");
      n && s.expect(*n, "traces", n->is_array(), "an array of file names")) {
    for (const auto& item : *n->as_array()) {
      if (!s.expect(item, "traces", item.is_string(), "an array of file names")) continue;
      auto t = read_spot_trace(resolve(base_dir, item.as_string()->get()));
      if (!t.ok())
        s.bad(item, "traces", t.error().message());
      else
        p.traces.push_back(std::move(t).value());
    }
  }
  s.choice("trace_kind", p.trace_kind,
           {{"preemption", TraceKind::kPreemption}, {"availability", TraceKind::kAvailability}});
  s.boolean("trace_random_offset", p.trace_random_offset);
  s.finish();
}

void read_policy(Section s, Policy& p, const std::string& name_default) {
  p.name = name_default;
  s.string("name", p.name);
  s.choice("interval", p.interval,
           {{"steps", policies::IntervalMode::kSteps},
            {"time", policies::IntervalMode::kTime},
            {"auto", policies::IntervalMode::kAuto}});
  s.seconds("every", p.every, false);
  s.integer("every_steps", p.every_steps, 0, INT64_MAX);
  double mtbf = 0;
  if (s.seconds("mtbf", mtbf, false)) p.mtbf_prior = mtbf;
  s.boolean("emergency", p.emergency);
  s.integer("min_nodes", p.min_nodes, 0, kMaxNodes);
  s.finish();
}

void read_sweep(Section s, FleetConfig& c) {
  s.string("policy", c.sweep.base);
  if (const toml::node* n = s.get("intervals");
      n && s.expect(*n, "intervals", n->is_array(), "an array of durations")) {
    for (const auto& item : *n->as_array()) {
      double v = 0;
      if (s.parse_seconds(item, "intervals", v, false)) c.sweep.intervals.push_back(v);
    }
  }
  s.finish();
}

}  // namespace

Result<FleetConfig> parse_fleet_config(std::string_view text, const std::string& source,
                                       const std::string& base_dir) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return Error(ErrorCode::kInvalid, source + ":" + std::to_string(e.source().begin.line) + ": " +
                                          std::string(e.description()));
  }
  FleetConfig c;
  c.source = source;
  Problems problems(source);
  Section top(&root, "", problems);
  auto table = [&](const char* key) -> const toml::table* {
    const toml::node* n = top.get(key);
    if (n && !n->is_table()) {
      problems.add(n->source().begin.line, key, "expected a table");
      return nullptr;
    }
    return n ? n->as_table() : nullptr;
  };
  // [job] first: failure rates and the elastic policy's default depend on its size.
  read_simulation(Section(table("simulation"), "simulation", problems), c);
  read_job(Section(table("job"), "job", problems), c);
  read_storage(Section(table("storage"), "storage", problems), c, base_dir);
  read_costs(Section(table("costs"), "costs", problems), c);
  read_restart(Section(table("restart"), "restart", problems), c);
  read_failures(Section(table("failures"), "failures", problems), c);
  read_preemption(Section(table("preemption"), "preemption", problems), c, base_dir);
  if (const toml::node* n = top.get("policy")) {
    if (!n->is_array_of_tables()) {
      problems.add(n->source().begin.line, "policy", "expected [[policy]] tables");
    } else {
      const auto& arr = *n->as_array();
      for (size_t i = 0; i < arr.size(); ++i) {
        Policy p;
        read_policy(Section(arr[i].as_table(), "policy[" + std::to_string(i) + "]", problems), p,
                    "policy-" + std::to_string(i + 1));
        c.policies.push_back(std::move(p));
      }
    }
  }
  if (c.policies.empty()) c.policies = default_policies(c.job);
  read_sweep(Section(table("sweep"), "sweep", problems), c);
  top.finish();
  SG_RETURN_IF_ERROR(problems.status());
  SG_RETURN_IF_ERROR(validate(c));
  return c;
}

Result<FleetConfig> load_fleet_config(const std::string& path) {
  SG_ASSIGN_OR_RETURN(
      const std::string text,
      read_regular_file(path, size_t{4} << 20, "the fleet config", LinkPolicy::kFollow));
  return parse_fleet_config(text, path, std::filesystem::path(path).parent_path().string());
}

}  // namespace shardguard::sim
