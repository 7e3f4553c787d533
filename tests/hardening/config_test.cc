// The job config (supervisor/job_config_toml.cc):
//   - finding: `[stop] grace = "106000d"` overflowed the deadline: every duration has a
//     ceiling, and a value past it is an error naming the key and the ceiling;
//   - finding: keys that parse and do nothing: every key of the schema, set to a value other
//     than its default, changes the configuration the supervisor gets (the run tests prove
//     [log] and [job] group at run time);
//   - [job] group by name or number.
#include <grp.h>

#include <catch2/catch.hpp>
#include <functional>

#include "supervisor/job_config_toml.h"

using namespace shardguard;
using namespace shardguard::supervisor;
using namespace std::chrono_literals;

namespace {

Result<JobConfig> parse(const std::string& text) { return parse_job_config(text, "job.toml"); }

struct KeyCase {
  std::string toml;  // a section and one key, set away from its default
  std::function<bool(const JobConfig&)> took;
};

}  // namespace

TEST_CASE("every duration has a ceiling; past it is an error naming the key", "[unit]") {
  auto grace = parse("[stop]\ngrace = \"106000d\"\n");
  REQUIRE_FALSE(grace.ok());
  CHECK(grace.error().message() == "job.toml:2: stop.grace: must be at most 1d, got \"106000d\"");

  struct Ceiling {
    std::string section, key, at_ceiling, past, also = "";
  };
  const Ceiling c = GENERATE(values<Ceiling>({
      {"job", "coordinator_timeout", "1d", "2d"},
      {"job", "rendezvous_timeout", "1d", "2d"},
      {"checkpoint", "every", "31d", "32d"},
      {"checkpoint", "mtbf", "3653d", "3654d"},
      {"checkpoint", "commit_timeout", "1d", "1d1s"},
      {"restart", "backoff_initial", "1d", "25h", "backoff_max = \"7d\"\n"},
      {"restart", "backoff_max", "7d", "8d"},
      {"restart", "healthy_after", "31d", "32d"},
      {"restart.crash", "window", "366d", "367d"},
      {"restart.preempted", "window", "366d", "106000d"},
      {"health", "hang_timeout", "7d", "8d"},
      {"health", "startup_timeout", "7d", "8d"},
      {"health", "check_interval", "1d", "2d"},
      {"stop", "grace", "1d", "106000d"},
      {"stop", "safety_margin", "1h", "61m"},
      {"stop", "term_grace", "1h", "2h"},
      {"agent", "poll_interval", "1h", "2h"},
      {"agent", "signal_grace", "1d", "2d"},
  }));
  INFO(c.section << "." << c.key);
  const std::string head = "[" + c.section + "]\n" + c.also + c.key + " = ";
  CHECK(parse(head + "\"" + c.at_ceiling + "\"\n").ok());
  auto past = parse(head + "\"" + c.past + "\"\n");
  REQUIRE_FALSE(past.ok());
  CHECK_THAT(past.error().message(), Catch::Contains(c.section + "." + c.key + ": must be at most"));
  // Hooks' timeouts too.
  auto hook = parse("[[hooks]]\nevent = \"restart\"\ncommand = [\"true\"]\ntimeout = \"2h\"\n");
  REQUIRE_FALSE(hook.ok());
  CHECK_THAT(hook.error().message(), Catch::Contains("hooks[0].timeout: must be at most 1h"));
}

TEST_CASE("[job] group: by name or number; an unknown one is an error", "[unit]") {
  const group* g = ::getgrgid(0);
  REQUIRE(g != nullptr);
  auto by_name = parse("[job]\ngroup = \"" + std::string(g->gr_name) + "\"\n");
  REQUIRE(by_name.ok());
  CHECK(by_name->group == 0u);
  auto by_number = parse("[job]\ngroup = 4242\n");
  REQUIRE(by_number.ok());
  CHECK(by_number->group == 4242u);
  auto unknown = parse("[job]\ngroup = \"no-such-group-sg\"\n");
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.error().message(),
             Catch::Contains("job.group: unknown group \"no-such-group-sg\""));
  CHECK_FALSE(parse("[job]\ngroup = -1\n").ok());
  CHECK_FALSE(parse("[job]\n").value().group.has_value());
}

TEST_CASE("every key of the schema, when set, changes the configuration", "[unit]") {
  const JobConfig d;  // the defaults
  const KeyCase k = GENERATE_COPY(values<KeyCase>({
      {"[job]\nid = \"j\"", [](auto& c) { return c.job_id == "j"; }},
      {"[job]\nnproc = 3", [](auto& c) { return c.nproc == 3; }},
      {"[job]\ncheckpoint_dir = \"/c\"", [](auto& c) { return c.checkpoint_dir == "/c"; }},
      {"[job]\nrun_dir = \"/r\"", [](auto& c) { return c.run_dir == "/r"; }},
      {"[job]\nmaster_addr = \"10.0.0.1\"", [](auto& c) { return c.master_addr == "10.0.0.1"; }},
      {"[job]\nmaster_port = 1234", [](auto& c) { return c.master_port == 1234; }},
      {"[job]\ncommand = [\"a\", \"b\"]", [](auto& c) { return c.command.size() == 2; }},
      {"[job.env]\nX = \"1\"", [](auto& c) { return c.env.count("X") == 1; }},
      {"[job]\ngroup = 7", [](auto& c) { return c.group == 7u; }},
      {"[job]\ncoordinator_timeout = \"7s\"", [](auto& c) { return c.coordinator_timeout == 7s; }},
      {"[job]\nrendezvous_timeout = \"7s\"", [](auto& c) { return c.rendezvous_timeout == 7s; }},
      {"[checkpoint]\ninterval = \"time\"",
       [](auto& c) { return c.interval_mode == IntervalMode::kTime; }},
      {"[checkpoint]\nevery_steps = 7", [](auto& c) { return c.every_steps == 7; }},
      {"[checkpoint]\nevery = \"7m\"", [](auto& c) { return c.every == 7min; }},
      {"[checkpoint]\nmtbf = \"7h\"", [](auto& c) { return c.mtbf == 7h; }},
      {"[checkpoint]\nresume_verify = \"checksum\"",
       [](auto& c) { return c.resume_verify == VerifyMode::kChecksum; }},
      {"[checkpoint]\nkeep_last = 7", [](auto& c) { return c.keep_last == 7; }},
      {"[checkpoint]\nkeep_every = 7", [](auto& c) { return c.keep_every == 7; }},
      {"[checkpoint]\nquarantine_keep = \"7h\"", [](auto& c) { return c.quarantine_keep == 7h; }},
      {"[checkpoint]\ncommit_timeout = \"7s\"", [](auto& c) { return c.commit_timeout == 7s; }},
      {"[restart]\nbackoff_initial = \"7ms\"", [](auto& c) { return c.backoff_initial == 7ms; }},
      {"[restart]\nbackoff_max = \"7s\"", [](auto& c) { return c.backoff_max == 7s; }},
      {"[restart]\nbackoff_multiplier = 3", [](auto& c) { return c.backoff_multiplier == 3.0; }},
      {"[restart]\nbackoff_jitter = 0.5", [](auto& c) { return c.backoff_jitter == 0.5; }},
      {"[restart]\nhealthy_after = \"7s\"", [](auto& c) { return c.healthy_after == 7s; }},
      {"[restart]\nno_progress_limit = 7", [](auto& c) { return c.no_progress_limit == 7; }},
      {"[restart]\npreemption_exit_codes = [7]",
       [](auto& c) { return c.preemption_exit_codes == std::vector<int>{7}; }},
      {"[restart]\nfutile_requeue_limit = 7", [](auto& c) { return c.futile_requeue_limit == 7; }},
      {"[restart.crash]\nmax_restarts = 7", [](auto& c) { return c.crash.max_restarts == 7; }},
      {"[restart.hang]\nwindow = \"7h\"", [](auto& c) { return c.hang.window == 7h; }},
      {"[restart.infrastructure]\nmax_restarts = 7",
       [](auto& c) { return c.infrastructure.max_restarts == 7; }},
      {"[restart.preempted]\nmax_restarts = 7",
       [](auto& c) { return c.preempted.max_restarts == 7; }},
      {"[restart.no_space]\nmax_restarts = 7", [](auto& c) { return c.no_space.max_restarts == 7; }},
      {"[restart.resume_failed]\nmax_restarts = 7",
       [](auto& c) { return c.resume_failed.max_restarts == 7; }},
      {"[health]\nhang_timeout = \"7s\"", [](auto& c) { return c.hang_timeout == 7s; }},
      {"[health]\nstartup_timeout = \"7s\"", [](auto& c) { return c.startup_timeout == 7s; }},
      {"[health]\nchecks = false", [](auto& c) { return !c.node_health.enabled; }},
      {"[health]\ngpu = false", [](auto& c) { return !c.node_health.gpu; }},
      {"[health]\nxid = false", [](auto& c) { return !c.node_health.xid; }},
      {"[health]\ndisk = false", [](auto& c) { return !c.node_health.disk; }},
      {"[health]\nmemory = false", [](auto& c) { return !c.node_health.memory; }},
      {"[health]\nnvml_library = \"x.so\"",
       [](auto& c) { return c.node_health.nvml_library == "x.so"; }},
      {"[health]\nexpected_gpus = 7", [](auto& c) { return c.node_health.expected_gpus == 7; }},
      {"[health]\nkernel_log = \"/k\"", [](auto& c) { return c.node_health.kernel_log == "/k"; }},
      {"[health]\ndisk_warning = \"7GiB\"",
       [](auto& c) { return c.node_health.disk_warning_bytes == 7ull << 30; }},
      {"[health]\ndisk_fatal = \"7MiB\"",
       [](auto& c) { return c.node_health.disk_fatal_bytes == 7ull << 20; }},
      {"[health]\ncheck_interval = \"7s\"",
       [](auto& c) { return c.node_health.disk_policy.interval == 7s; }},
      {"[stop]\ncheckpoint_signal = \"SIGUSR2\"", [](auto& c) { return c.checkpoint_signal == 12; }},
      {"[stop]\ngrace = \"7s\"", [](auto& c) { return c.grace == 7s; }},
      {"[stop]\nsafety_margin = \"7s\"", [](auto& c) { return c.safety_margin == 7s; }},
      {"[stop]\nterm_grace = \"7s\"", [](auto& c) { return c.term_grace == 7s; }},
      {"[metrics]\nport = 7777", [](auto& c) { return c.metrics_port == 7777; }},
      {"[metrics]\naddress = \"0.0.0.0\"", [](auto& c) { return c.metrics_address == "0.0.0.0"; }},
      {"[log]\nformat = \"json\"", [](auto& c) { return c.log_format == "json"; }},
      {"[log]\nlevel = \"warn\"", [](auto& c) { return c.log_level == "warn"; }},
      {"[[hooks]]\nevent = \"restart\"\ncommand = [\"true\"]",
       [](auto& c) { return c.hooks.size() == 1 && c.hooks[0].event == "restart"; }},
      {"[[hooks]]\nevent = \"restart\"\nurl = \"http://h/x\"\ntimeout = \"7s\"\nretries = 7",
       [](auto& c) {
         return c.hooks.size() == 1 && c.hooks[0].url == "http://h/x" && c.hooks[0].timeout == 7s &&
                c.hooks[0].retries == 7;
       }},
      {"[agent]\nclouds = \"aws\"", [](auto& c) { return c.agent.clouds == "aws"; }},
      {"[agent]\naws_url = \"http://a\"", [](auto& c) { return c.agent.aws_url == "http://a"; }},
      {"[agent]\ngcp_url = \"http://g\"", [](auto& c) { return c.agent.gcp_url == "http://g"; }},
      {"[agent]\nazure_url = \"http://z\"", [](auto& c) { return c.agent.azure_url == "http://z"; }},
      {"[agent]\nazure_vm_name = \"vm\"", [](auto& c) { return c.agent.azure_vm_name == "vm"; }},
      {"[agent]\npoll_interval = \"7s\"", [](auto& c) { return c.agent.poll_interval == 7s; }},
      {"[agent]\nnotice_signals = [\"SIGUSR1\"]",
       [](auto& c) { return c.agent.notice_signals == std::vector<int>{10}; }},
      {"[agent]\nsignal_grace = \"7s\"", [](auto& c) { return c.agent.signal_grace == 7s; }},
      {"[agent]\nrun_dirs = [\"/r\"]",
       [](auto& c) { return c.agent.run_dirs == std::vector<std::string>{"/r"}; }},
  }));
  INFO(k.toml);
  auto c = parse(k.toml + "\n");
  REQUIRE(c.ok());
  CHECK(k.took(*c));
  CHECK_FALSE(k.took(d));  // the value differs from the default: the key did it
}
