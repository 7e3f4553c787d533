#include "supervisor/job_config_toml.h"

#include <arpa/inet.h>
#include <grp.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/units.h"
#include "supervisor/toml_section.h"
#include "policies/signal_names.h"

namespace shardguard::supervisor {
namespace {

using namespace config_detail;

// A group by name (the group database) or number.
std::optional<uint32_t> lookup_group(const std::string& name) {
  if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos &&
      name.size() < 10)
    return static_cast<uint32_t>(std::stoul(name));
  group entry{};
  group* found = nullptr;
  std::vector<char> buf(16384);
  if (::getgrnam_r(name.c_str(), &entry, buf.data(), buf.size(), &found) != 0 || !found)
    return std::nullopt;
  return static_cast<uint32_t>(found->gr_gid);
}

void read_job(Section s, JobConfig& c) {
  s.string("id", c.job_id);
  // The run and checkpoint directories' group, so that on-call engineers in it can read.
  if (const toml::node* n = s.get("group");
      n && s.expect(*n, "group", n->is_string() || n->is_integer(), "a group name or number")) {
    const std::string name =
        n->is_string() ? n->as_string()->get() : std::to_string(n->as_integer()->get());
    const auto gid = n->is_integer() && (n->as_integer()->get() < 0 ||
                                         n->as_integer()->get() > kMaxU32 - 1)
                         ? std::nullopt
                         : lookup_group(name);
    if (!gid)
      s.bad(*n, "group", "unknown group " + Section::toml_text(*n));
    else
      c.group = *gid;
  }
  s.integer("nproc", c.nproc, 1, kMaxU32);
  s.string("checkpoint_dir", c.checkpoint_dir);
  if (const toml::node* n = s.get("checkpoint_dir"); n && n->is_string())
    if (auto loc = storage::Location::parse(c.checkpoint_dir); !loc.ok())
      s.bad(*n, "checkpoint_dir", loc.error().message());
  s.string("run_dir", c.run_dir);
  s.string("master_addr", c.master_addr);
  s.integer("master_port", c.master_port, 1, 65535);
  s.duration("coordinator_timeout", c.coordinator_timeout, true, kDay);
  s.duration("rendezvous_timeout", c.rendezvous_timeout, true, kDay);
  if (const toml::node* n = s.get("command");
      n && s.expect(*n, "command", n->is_array(), "an array of strings")) {
    std::vector<std::string> command;
    const toml::array& items = *n->as_array();
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string key = "command[" + std::to_string(i) + "]";
      if (s.expect(items[i], key, items[i].is_string(), "a string"))
        command.push_back(items[i].as_string()->get());
    }
    if (command.size() == items.size()) c.command = std::move(command);
  }
  if (const toml::table* env = s.table("env")) {
    for (const auto& [key, node] : *env) {
      const std::string name = "env." + std::string(key.str());
      if (s.expect(node, name, node.is_string(), "a string"))
        c.env[std::string(key.str())] = node.as_string()->get();
    }
  }
  s.finish();
}

void read_checkpoint(Section s, JobConfig& c) {
  s.choice("interval", c.interval_mode,
           {{"steps", IntervalMode::kSteps},
            {"time", IntervalMode::kTime},
            {"auto", IntervalMode::kAuto}});
  s.integer("every_steps", c.every_steps, 1, kMaxI64);
  s.duration("every", c.every, true, kMonth);
  s.duration("mtbf", c.mtbf, true, kDecade);
  s.choice("resume_verify", c.resume_verify,
           {{"size", VerifyMode::kSize}, {"checksum", VerifyMode::kChecksum}});
  s.integer("keep_last", c.keep_last, 0, kMaxU32);
  s.integer("keep_every", c.keep_every, 0, kMaxI64);
  s.duration("quarantine_keep", c.quarantine_keep, false, kDecade);
  s.duration("commit_timeout", c.commit_timeout, true, kDay);
  s.finish();
}

void read_budget(Section s, RestartBudget& b) {
  s.integer("max_restarts", b.max_restarts, 0, kMaxU32);
  s.duration("window", b.window, true, kYear);
  s.finish();
}

void read_restart(Section s, JobConfig& c, Problems& problems) {
  const toml::node* initial = s.duration("backoff_initial", c.backoff_initial, false, kDay);
  const toml::node* max = s.duration("backoff_max", c.backoff_max, false, kWeek);
  if ((initial || max) && c.backoff_max < c.backoff_initial) {
    s.bad(max ? *max : *initial, max ? "backoff_max" : "backoff_initial",
          "backoff_max (" + format_duration(c.backoff_max) + ") is below backoff_initial (" +
              format_duration(c.backoff_initial) + ")");
  }
  s.real("backoff_multiplier", c.backoff_multiplier, 1.0, 1000.0, "must be between 1 and 1000");
  s.real("backoff_jitter", c.backoff_jitter, 0.0, 0.99, "must be between 0 and 0.99");
  s.duration("healthy_after", c.healthy_after, false, kMonth);
  s.integer("no_progress_limit", c.no_progress_limit, 0, kMaxU32);
  if (const toml::node* n = s.get("preemption_exit_codes");
      n && s.expect(*n, "preemption_exit_codes", n->is_array(), "an array of integers")) {
    std::vector<int> codes;
    const toml::array& items = *n->as_array();
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string key = "[" + std::to_string(i) + "]";
      if (!s.expect(items[i], "preemption_exit_codes" + key, items[i].is_integer(), "an integer"))
        continue;
      const int64_t v = items[i].as_integer()->get();
      if (v < 1 || v > 255)
        s.bad(items[i], "preemption_exit_codes" + key, range_text(v, 1, 255));
      else
        codes.push_back(static_cast<int>(v));
    }
    if (codes.size() == items.size()) c.preemption_exit_codes = std::move(codes);
  }
  s.integer("futile_requeue_limit", c.futile_requeue_limit, 0, 1000);
  const std::pair<const char*, RestartBudget*> budgets[] = {{"crash", &c.crash},
                                                            {"hang", &c.hang},
                                                            {"infrastructure", &c.infrastructure},
                                                            {"preempted", &c.preempted},
                                                            {"no_space", &c.no_space},
                                                            {"resume_failed", &c.resume_failed}};
  for (const auto& [name, budget] : budgets) {
    if (const toml::table* t = s.table(name))
      read_budget(Section(t, s.key_path(name), problems), *budget);
  }
  s.finish();
}

void read_stop(Section s, JobConfig& c) {
  if (const toml::node* n = s.get("checkpoint_signal");
      n && s.expect(*n, "checkpoint_signal", n->is_string(), "a signal name like \"SIGUSR1\"")) {
    const std::string& name = n->as_string()->get();
    const std::optional<int> number = policies::signal_number(name);
    if (!number)
      s.bad(*n, "checkpoint_signal", "unknown signal '" + name + "' (use a name like \"SIGUSR1\")");
    else if (*number == SIGKILL || *number == SIGSTOP)
      s.bad(*n, "checkpoint_signal", name + " cannot be caught by the job; use e.g. \"SIGUSR1\"");
    else
      c.checkpoint_signal = *number;
  }
  s.duration("grace", c.grace, false, kDay);
  s.duration("safety_margin", c.safety_margin, false, kHour);
  s.duration("term_grace", c.term_grace, false, kHour);
  s.finish();
}

void read_agent(Section s, agent::AgentSettings& a) {
  s.choice("clouds", a.clouds,
           {{"none", "none"}, {"auto", "auto"}, {"aws", "aws"}, {"gcp", "gcp"}, {"azure", "azure"}});
  s.string("aws_url", a.aws_url);
  s.string("gcp_url", a.gcp_url);
  s.string("azure_url", a.azure_url);
  s.string("azure_vm_name", a.azure_vm_name);
  s.string("dmi_dir", a.dmi_dir);
  s.duration("poll_interval", a.poll_interval, true, kHour);
  if (const toml::node* n = s.get("notice_signals");
      n && s.expect(*n, "notice_signals", n->is_array(), "an array of signal names")) {
    for (const auto& item : *n->as_array()) {
      const auto* name = item.as_string();
      const std::optional<int> number = name ? policies::signal_number(name->get()) : std::nullopt;
      if (!number || *number == SIGKILL || *number == SIGSTOP) {
        s.bad(item, "notice_signals",
              "expected catchable signal names like \"SIGUSR1\", got " + Section::toml_text(item));
        continue;
      }
      a.notice_signals.push_back(*number);
    }
  }
  s.duration("signal_grace", a.signal_grace, true, kDay);
  // The drain file is gone: an operator's drain reaches the run through its agent socket.
  for (const char* removed : {"drain_file", "drain_grace"})
    if (const toml::node* n = s.get(removed))
      s.bad(*n, removed,
            "was removed: `shardguard drain --run-dir DIR [--deadline 60s]` talks to the run "
            "directly");
  if (const toml::node* n = s.get("run_dirs");
      n && s.expect(*n, "run_dirs", n->is_array(), "an array of run directories")) {
    for (const auto& item : *n->as_array()) {
      if (!item.is_string() || item.as_string()->get().empty())
        s.bad(item, "run_dirs", "expected non-empty strings, got " + Section::toml_text(item));
      else
        a.run_dirs.push_back(item.as_string()->get());
    }
  }
  s.finish();
}

void flag(Section& s, std::string_view key, bool& out) {
  if (const toml::node* n = s.get(key); n && s.expect(*n, key, n->is_boolean(), "true or false"))
    out = n->as_boolean()->get();
}

void size(Section& s, std::string_view key, uint64_t& out) {
  const toml::node* n = s.get(key);
  if (!n || !s.expect(*n, key, n->is_string(), "a size string like \"10GiB\"")) return;
  auto parsed = parse_size(n->as_string()->get());
  if (!parsed.ok()) return s.bad(*n, key, parsed.error().message());
  out = *parsed;
}

// [storage]: the bucket behind an s3:// checkpoint_dir.
void read_storage(Section s, JobConfig& c) {
  storage::s3::S3Options& o = c.storage;
  s.string("endpoint", o.endpoint);
  s.string("region", o.region);
  s.choice("addressing", o.addressing,
           {{"auto", storage::s3::Addressing::kAuto},
            {"path", storage::s3::Addressing::kPath},
            {"virtual", storage::s3::Addressing::kVirtual}});
  const toml::node* part = s.get("part_size");
  size(s, "part_size", o.part_size);
  if (part && (o.part_size < storage::s3::kMinPartSize || o.part_size > storage::s3::kMaxPartSize))
    s.bad(*part, "part_size", format_size(o.part_size) + " is outside S3's 5MiB to 5GiB for a part");
  const toml::node* read = s.get("read_size");
  size(s, "read_size", o.read_size);
  if (read && (o.read_size < storage::s3::kMinReadSize || o.read_size > storage::s3::kMaxReadSize))
    s.bad(*read, "read_size", format_size(o.read_size) + " is outside 1MiB to 64MiB");
  const toml::node* inflight = s.get("max_inflight");
  size(s, "max_inflight", o.max_inflight);
  if (inflight && o.max_inflight < o.part_size)
    s.bad(*inflight, "max_inflight",
          format_size(o.max_inflight) + " is less than one part (" + format_size(o.part_size) + ")");
  s.duration("request_timeout", o.request_timeout, true, kDay);
  s.duration("stall_timeout", o.stall_time, true, kHour);
  s.integer("retries", o.retries, 0, 20);
  flag(s, "tls_verify", o.tls_verify);
  flag(s, "allow_http", o.allow_http);
  s.string("ca_file", o.ca_file);
  s.duration("lease_timeout", c.lease_timeout, true, kDay);
  s.finish();
}

// The node checks: checks = false turns them all off.
void read_node_health(Section& s, agent::HealthSettings& h) {
  flag(s, "checks", h.enabled);
  flag(s, "gpu", h.gpu);
  flag(s, "xid", h.xid);
  flag(s, "disk", h.disk);
  flag(s, "memory", h.memory);
  s.string("nvml_library", h.nvml_library);
  s.integer("expected_gpus", h.expected_gpus, -1, 1024);
  s.string("kernel_log", h.kernel_log);
  size(s, "disk_warning", h.disk_warning_bytes);
  size(s, "disk_fatal", h.disk_fatal_bytes);
  Duration interval{0};
  if (s.duration("check_interval", interval, true, kDay))
    for (auto* p : {&h.gpu_policy, &h.xid_policy, &h.disk_policy, &h.memory_policy})
      p->interval = interval;
}

// [[hooks]]: an array of tables {event, command = [argv], url, timeout, retries}.
void read_hooks(Section& root, std::vector<hooks::HookSpec>& out, Problems& problems) {
  const toml::node* n = root.get("hooks");
  if (n == nullptr) return;
  if (!root.expect(*n, "hooks", n->is_array_of_tables(), "[[hooks]] tables")) return;
  size_t i = 0;
  for (const auto& item : *n->as_array()) {
    Section h(item.as_table(), "hooks[" + std::to_string(i++) + "]", problems);
    hooks::HookSpec spec;
    h.string("event", spec.event);
    if (const toml::node* cmd = h.get("command");
        cmd && h.expect(*cmd, "command", cmd->is_array(), "an array of strings (argv)")) {
      for (const auto& arg : *cmd->as_array()) {
        if (!arg.is_string()) {
          h.bad(arg, "command", "expected strings, got " + Section::toml_text(arg));
          continue;
        }
        spec.command.push_back(arg.as_string()->get());
      }
    }
    h.string("url", spec.url);
    h.duration("timeout", spec.timeout, true, kHour);
    h.integer("retries", spec.retries, 0, hooks::kMaxHookRetries);
    if (auto st = hooks::validate_hook(spec); !st.ok())
      problems.add(item.source(), "hooks", st.error().message());
    h.finish();
    out.push_back(std::move(spec));
  }
}

// An IP literal: the endpoint binds to it, so a host name would only fail later, at bind time.
void read_metrics_address(Section& s, std::string& out) {
  const toml::node* n = s.get("address");
  if (!n || !s.expect(*n, "address", n->is_string(), "an IP address like \"0.0.0.0\"")) return;
  const std::string& text = n->as_string()->get();
  in6_addr buf{};
  if (::inet_pton(AF_INET, text.c_str(), &buf) != 1 && ::inet_pton(AF_INET6, text.c_str(), &buf) != 1)
    return s.bad(*n, "address",
                 "expected an IPv4 or IPv6 address like \"0.0.0.0\" or \"::\", got \"" + text + "\"");
  out = text;
}

// A list of scalar names the guard knows ("loss", "grad_norm").
void scalar_names(Section& s, std::string_view key, std::set<std::string>& out) {
  const toml::node* n = s.get(key);
  if (!n || !s.expect(*n, key, n->is_array(), "an array of scalar names like [\"loss\"]")) return;
  std::set<std::string> names;
  for (const auto& item : *n->as_array()) {
    if (!item.is_string() || !policies::known_scalar(item.as_string()->get()))
      return s.bad(item, key, "expected \"loss\" or \"grad_norm\", got " + Section::toml_text(item));
    names.insert(item.as_string()->get());
  }
  out = std::move(names);
}

// [guard]: the divergence guard's rules and what it does about an anomaly.
void read_guard(Section s, policies::GuardOptions& g) {
  flag(s, "enabled", g.enabled);
  scalar_names(s, "nonfinite", g.nonfinite);
  s.real("spike_factor", g.spike_factor, 0, 1e9, "0 (off) or a factor above 1");
  if (g.spike_factor > 0 && g.spike_factor <= 1)
    if (const toml::node* n = s.get("spike_factor"))
      s.bad(*n, "spike_factor", "must be 0 (off) or above 1: a value at or below the median is no spike");
  s.integer("spike_steps", g.spike_steps, 1, kMaxI64);
  scalar_names(s, "spike_scalars", g.spike_scalars);
  s.integer("median_window", g.median_window, 1, 100000);
  s.integer("min_samples", g.min_samples, 1, 100000);
  s.integer("rollbacks", g.rollbacks, 0, 1000);
  s.integer("skip_batches", g.skip_batches, 0, kMaxI64);
  s.finish();
}

void read_root(const toml::table& root, JobConfig& c, Problems& problems) {
  Section s(&root, "", problems);
  auto section = [&](std::string_view name) {
    return Section(s.table(name), std::string(name), problems);
  };
  read_job(section("job"), c);
  read_checkpoint(section("checkpoint"), c);
  read_storage(section("storage"), c);
  read_restart(section("restart"), c, problems);
  {
    Section health = section("health");
    health.duration("hang_timeout", c.hang_timeout, false, kWeek);
    health.duration("startup_timeout", c.startup_timeout, false, kWeek);
    read_node_health(health, c.node_health);
    health.finish();
  }
  read_stop(section("stop"), c);
  {
    Section metrics = section("metrics");
    metrics.integer("port", c.metrics_port, 0, 65535);
    read_metrics_address(metrics, c.metrics_address);
    metrics.finish();
  }
  {
    Section log = section("log");
    log.choice("format", c.log_format, {{"text", "text"}, {"json", "json"}});
    log.choice("level", c.log_level,
               {{"trace", "trace"},
                {"debug", "debug"},
                {"info", "info"},
                {"warn", "warn"},
                {"error", "error"},
                {"critical", "critical"},
                {"off", "off"}});
    log.finish();
  }
  read_hooks(s, c.hooks, problems);
  read_agent(section("agent"), c.agent);
  read_guard(section("guard"), c.guard);
  s.finish();
}

}  // namespace

Result<JobConfig> parse_job_config(std::string_view toml_text, std::string_view source_name) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    return Error(ErrorCode::kInvalid, std::string(source_name) + ":" + std::to_string(at.line) +
                                          ":" + std::to_string(at.column) + ": " +
                                          std::string(e.description()));
  }
  JobConfig config;
  Problems problems(source_name);
  read_root(root, config, problems);
  SG_RETURN_IF_ERROR(problems.status());
  return config;
}

Result<JobConfig> load_job_config(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Error::from_errno("open config '" + path + "'", errno);
  std::string text;
  char buf[8192];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (err != 0) return Error::from_errno("read config '" + path + "'", err);
  return parse_job_config(text, path);
}

}  // namespace shardguard::supervisor
