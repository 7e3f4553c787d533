#include "supervisor/job_config_toml.h"

#include <catch2/catch.hpp>
#include <set>
#include <csignal>
#include <fstream>

#include "tests/support/temp_dir.h"

using namespace std::chrono_literals;
using shardguard::ErrorCode;
using namespace shardguard::supervisor;

namespace {

constexpr const char* kFull = R"(# a full job file
[job]
id = "llama-7b"
nproc = 8
checkpoint_dir = "/ckpt/llama"
run_dir = "/runs/llama"
command = ["python", "train.py", "--lr", "3e-4"]
master_addr = "10.0.0.1"
master_port = 29400
[job.env]
NCCL_DEBUG = "WARN"
OMP_NUM_THREADS = "4"

[checkpoint]
interval = "auto"
every_steps = 500
every = "15m"
mtbf = "6h"
resume_verify = "checksum"
keep_last = 5
keep_every = 10000
commit_timeout = "20m"

[restart]
backoff_initial = "2s"
backoff_max = "10m"
backoff_multiplier = 3
backoff_jitter = 0.1
healthy_after = "30m"
no_progress_limit = 4
preemption_exit_codes = [75, 143]
[restart.crash]
max_restarts = 2
window = "2h"
[restart.hang]
max_restarts = 1
window = "30m"
[restart.infrastructure]
max_restarts = 10
window = "1d"
[restart.preempted]
max_restarts = 1000
window = "7d"

[health]
hang_timeout = "2m"
startup_timeout = "15m"

[stop]
checkpoint_signal = "SIGUSR2"
grace = "90s"
safety_margin = "5s"
term_grace = "20s"

[metrics]
port = 9400

[log]
format = "json"
level = "debug"

[[hooks]]
event = "checkpoint_committed"
command = ["echo", "saved"]
timeout = "5s"

[agent]
clouds = "aws"
aws_url = "http://127.0.0.1:8080"
notice_signals = ["SIGUSR1"]
run_dirs = ["runs/a"]
)";

JobConfig parse_ok(std::string_view text) {
  auto r = parse_job_config(text, "job.toml");
  if (!r.ok()) FAIL(r.error().message());
  return std::move(r).value();
}

std::string parse_error(std::string_view text) {
  auto r = parse_job_config(text, "job.toml");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == ErrorCode::kInvalid);
  return r.error().message();
}

}  // namespace

TEST_CASE("a full job file fills every field") {
  const JobConfig c = parse_ok(kFull);
  CHECK(c.job_id == "llama-7b");
  CHECK(c.nproc == 8);
  CHECK(c.checkpoint_dir == "/ckpt/llama");
  CHECK(c.run_dir == "/runs/llama");
  CHECK(c.command == std::vector<std::string>{"python", "train.py", "--lr", "3e-4"});
  CHECK(c.master_addr == "10.0.0.1");
  CHECK(c.master_port == 29400);
  CHECK(c.env ==
        std::map<std::string, std::string>{{"NCCL_DEBUG", "WARN"}, {"OMP_NUM_THREADS", "4"}});
  CHECK(c.interval_mode == IntervalMode::kAuto);
  CHECK(c.every_steps == 500);
  CHECK(c.every == 15min);
  CHECK(c.mtbf == 6h);
  CHECK(c.resume_verify == VerifyMode::kChecksum);
  CHECK(c.keep_last == 5);
  CHECK(c.keep_every == 10000);
  CHECK(c.commit_timeout == 20min);
  CHECK(c.backoff_initial == 2s);
  CHECK(c.backoff_max == 10min);
  CHECK(c.backoff_multiplier == 3.0);
  CHECK(c.backoff_jitter == 0.1);
  CHECK(c.healthy_after == 30min);
  CHECK(c.no_progress_limit == 4);
  CHECK(c.preemption_exit_codes == std::vector<int>{75, 143});
  CHECK(c.crash.max_restarts == 2);
  CHECK(c.crash.window == 2h);
  CHECK(c.hang.max_restarts == 1);
  CHECK(c.hang.window == 30min);
  CHECK(c.infrastructure.max_restarts == 10);
  CHECK(c.infrastructure.window == 24h);
  CHECK(c.preempted.max_restarts == 1000);
  CHECK(c.preempted.window == 7 * 24h);
  CHECK(c.hang_timeout == 2min);
  CHECK(c.startup_timeout == 15min);
  CHECK(c.checkpoint_signal == SIGUSR2);
  CHECK(c.grace == 90s);
  CHECK(c.safety_margin == 5s);
  CHECK(c.term_grace == 20s);
  CHECK(c.metrics_port == 9400);
  CHECK(c.log_format == "json");
  REQUIRE(c.hooks.size() == 1);
  CHECK(c.hooks[0].event == "checkpoint_committed");
  CHECK(c.hooks[0].command == std::vector<std::string>{"echo", "saved"});
  CHECK(c.hooks[0].timeout == 5s);
  CHECK(c.agent.clouds == "aws");
  CHECK(c.agent.aws_url == "http://127.0.0.1:8080");
  CHECK(c.agent.notice_signals == std::vector<int>{SIGUSR1});
  CHECK(c.agent.run_dirs == std::vector<std::string>{"runs/a"});
  CHECK(c.log_level == "debug");
}

TEST_CASE("an empty file keeps the struct's defaults") {
  const JobConfig c = parse_ok("");
  const JobConfig d;
  CHECK(c.nproc == d.nproc);
  CHECK(c.command.empty());
  CHECK(c.interval_mode == d.interval_mode);
  CHECK(c.crash.max_restarts == d.crash.max_restarts);
  CHECK(c.preempted.window == d.preempted.window);
  CHECK(c.preemption_exit_codes == d.preemption_exit_codes);
  CHECK(c.checkpoint_signal == d.checkpoint_signal);
  CHECK(c.metrics_port == 0);
}

TEST_CASE("a partial budget table keeps the other default") {
  const JobConfig c = parse_ok("[restart.crash]\nmax_restarts = 7\n");
  CHECK(c.crash.max_restarts == 7);
  CHECK(c.crash.window == JobConfig{}.crash.window);
}

TEST_CASE("errors name the file, the line and the key") {
  const auto [text, expected] = GENERATE(table<std::string, std::string>({
      {"[job]\nnproc = 2\nnprocs = 4\n", "job.toml:3: job.nprocs: unknown key"},
      {"[job]\n\n\n\n\n[checkpoint]\nevery = \"5 min\"\n",
       "job.toml:7: checkpoint.every: invalid duration '5 min': missing unit (use ns, us, ms, "
       "s, m, h or d, e.g. '30s')"},
      {"[jobs]\nnproc = 1\n", "job.toml:1: jobs: unknown section"},
      {"[agent]\nclouds = \"ibm\"\n",
       "job.toml:2: agent.clouds: expected one of \"none\", \"auto\", \"aws\", \"gcp\", "
       "\"azure\", got \"ibm\""},
      {"[agent]\nnotice_signals = [\"SIGKILL\"]\n",
       "job.toml:2: agent.notice_signals: expected catchable signal names like \"SIGUSR1\", "
       "got \"SIGKILL\""},
      {"[[hooks]]\nevent = \"on_save\"\ncommand = [\"true\"]\n",
       "job.toml:1: hooks: hook 'on_save': unknown event (use preempt_notice, "
       "checkpoint_committed, restart, give_up, node_unhealthy or divergence)"},
      {"[health]\ndisk_fatal = \"1 GB\"\n",
       "job.toml:2: health.disk_fatal: invalid size '1 GB': unknown unit ' GB' (use B, KB, MB, "
       "GB, TB, PB, KiB, MiB, GiB, TiB or PiB)"},
      {"nproc = 1\n", "job.toml:1: nproc: unknown key"},
      {"[restart.crashes]\nmax_restarts = 1\n", "job.toml:1: restart.crashes: unknown section"},
      {"[restart.crash]\nmax = 1\n", "job.toml:2: restart.crash.max: unknown key"},
      {"[job]\nnproc = 0\n", "job.toml:2: job.nproc: must be at least 1, got 0"},
      {"[job]\nnproc = \"8\"\n", "job.toml:2: job.nproc: expected an integer, got string"},
      {"[job]\nnproc = 4294967296\n",
       "job.toml:2: job.nproc: must be at most 4294967295, got "
       "4294967296"},
      {"[job]\nmaster_port = 0\n",
       "job.toml:2: job.master_port: must be between 1 and 65535, got 0"},
      {"[metrics]\nport = 65536\n",
       "job.toml:2: metrics.port: must be between 0 and 65535, got 65536"},
      {"[checkpoint]\nkeep_last = -1\n",
       "job.toml:2: checkpoint.keep_last: must not be negative, got -1"},
      {"[restart.hang]\nmax_restarts = -2\n",
       "job.toml:2: restart.hang.max_restarts: must not be negative, got -2"},
      {"[restart.hang]\nwindow = \"0\"\n",
       "job.toml:2: restart.hang.window: must be greater than 0"},
      {"[restart]\npreemption_exit_codes = [75,\n  300]\n",
       "job.toml:3: restart.preemption_exit_codes[1]: must be between 1 and 255, got 300"},
      {"[restart]\npreemption_exit_codes = 75\n",
       "job.toml:2: restart.preemption_exit_codes: expected an array of integers, got integer"},
      {"[restart]\nbackoff_jitter = 1.5\n",
       "job.toml:2: restart.backoff_jitter: must be between 0 and 0.99, got 1.500000"},
      {"[restart]\nbackoff_initial = \"1m\"\nbackoff_max = \"30s\"\n",
       "job.toml:3: restart.backoff_max: backoff_max (30.00s) is below backoff_initial (1m00s)"},
      {"[health]\nhang_timeout = 300\n",
       "job.toml:2: health.hang_timeout: expected a duration string like \"30s\", got integer"},
      {"[checkpoint]\ninterval = \"hourly\"\n",
       "job.toml:2: checkpoint.interval: expected one of \"steps\", \"time\", \"auto\", got "
       "\"hourly\""},
      {"[checkpoint]\nevery_steps = 0\n",
       "job.toml:2: checkpoint.every_steps: must be at least 1, got 0"},
      {"[stop]\ncheckpoint_signal = \"USR1\"\n",
       "job.toml:2: stop.checkpoint_signal: unknown signal 'USR1' (use a name like \"SIGUSR1\")"},
      {"[stop]\ncheckpoint_signal = \"SIGKILL\"\n",
       "job.toml:2: stop.checkpoint_signal: SIGKILL cannot be caught by the job; use e.g. "
       "\"SIGUSR1\""},
      {"[log]\nformat = \"xml\"\n",
       "job.toml:2: log.format: expected one of \"text\", \"json\", got \"xml\""},
      {"[job]\ncommand = [\"python\", 3]\n",
       "job.toml:2: job.command[1]: expected a string, got integer"},
      {"[job.env]\nA = \"1\"\nB = 2\n", "job.toml:3: job.env.B: expected a string, got integer"},
      {"job = 3\n", "job.toml:1: job: expected a table, got integer"},
      {"[job]\nid = \"\"\n", "job.toml:2: job.id: must not be empty"},
      {"[guard]\nnonfinite = [\"accuracy\"]\n",
       "job.toml:2: guard.nonfinite: expected \"loss\" or \"grad_norm\", got \"accuracy\""},
      {"[guard]\nspike_factor = 0.5\n",
       "job.toml:2: guard.spike_factor: must be 0 (off) or above 1: a value at or below the "
       "median is no spike"},
      {"[guard]\nspike_steps = 0\n", "job.toml:2: guard.spike_steps: must be at least 1, got 0"},
      {"[guard]\nrollback = 3\n", "job.toml:2: guard.rollback: unknown key"},
  }));
  CHECK(parse_error(text) == expected);
}

TEST_CASE("[guard] sets the divergence guard's rules; defaults guard NaN losses only") {
  auto defaults = parse_job_config("", "job.toml");
  REQUIRE(defaults.ok());
  CHECK(defaults->guard.enabled);
  CHECK(defaults->guard.nonfinite == std::set<std::string>{"loss"});
  CHECK(defaults->guard.spike_factor == 0);
  CHECK(defaults->guard.rollbacks == 2);
  CHECK(defaults->guard.skip_batches == 0);
  auto c = parse_job_config(
      "[guard]\nnonfinite = [\"loss\", \"grad_norm\"]\nspike_factor = 8\nspike_steps = 20\n"
      "spike_scalars = [\"grad_norm\"]\nmedian_window = 50\nmin_samples = 5\nrollbacks = 1\n"
      "skip_batches = 64\n",
      "job.toml");
  REQUIRE(c.ok());
  CHECK(c->guard.nonfinite == std::set<std::string>{"loss", "grad_norm"});
  CHECK(c->guard.spike_factor == 8);
  CHECK(c->guard.spike_steps == 20);
  CHECK(c->guard.spike_scalars == std::set<std::string>{"grad_norm"});
  CHECK(c->guard.median_window == 50);
  CHECK(c->guard.min_samples == 5);
  CHECK(c->guard.rollbacks == 1);
  CHECK(c->guard.skip_batches == 64);
  auto off = parse_job_config("[guard]\nenabled = false\n", "job.toml");
  REQUIRE(off.ok());
  CHECK_FALSE(off->guard.enabled);
}

TEST_CASE("TOML syntax errors carry line and column") {
  const std::string message = parse_error("[job]\nnproc = 2\nid = \"unterminated\n");
  CHECK_THAT(message, Catch::StartsWith("job.toml:3:"));
  const std::string duplicate = parse_error("[job]\nnproc = 2\nnproc = 3\n");
  CHECK_THAT(duplicate, Catch::StartsWith("job.toml:3:"));
}

TEST_CASE("every problem is reported, in file order") {
  const std::string message = parse_error(
      "[metrics]\nport = 70000\n[job]\nnproc = 0\nbogus = 1\n[checkpoint]\nevery = \"x\"\n");
  CHECK(message ==
        "job.toml:2: metrics.port: must be between 0 and 65535, got 70000\n"
        "job.toml:4: job.nproc: must be at least 1, got 0\n"
        "job.toml:5: job.bogus: unknown key\n"
        "job.toml:7: checkpoint.every: invalid duration 'x': expected a number at 'x'");
}

TEST_CASE("load_job_config reads a file and names it in errors") {
  shardguard::testing::TempDir dir;
  const std::string path = dir / "job.toml";
  SECTION("a valid file") {
    std::ofstream(path) << kFull;
    auto r = load_job_config(path);
    REQUIRE(r.ok());
    CHECK(r->nproc == 8);
  }
  SECTION("an invalid one") {
    std::ofstream(path) << "[job]\nnproc = -1\n";
    auto r = load_job_config(path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message() == path + ":2: job.nproc: must be at least 1, got -1");
  }
  SECTION("a missing one") {
    auto r = load_job_config(dir / "missing.toml");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == ErrorCode::kNotFound);
    CHECK_THAT(r.error().message(), Catch::Contains("missing.toml"));
  }
}
