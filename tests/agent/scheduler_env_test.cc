// resolve_placement() against tables of environments as the kubelet, the JobSet controller
// and Slurm set them: good ones, ones with a value missing, and malformed ones.
#include "agent/scheduler_env.h"

#include <catch2/catch.hpp>

using namespace shardguard;
using namespace shardguard::agent;

namespace {

const EnvMap kIndexedPod1 = {{"JOB_COMPLETION_INDEX", "1"},
                             {"HOSTNAME", "trainer-1"},
                             {"SHARDGUARD_NNODES", "2"},
                             {"SHARDGUARD_RDZV_SERVICE", "trainer"},
                             {"SHARDGUARD_SECRET_FILE", "/etc/sg/s"},
                             {"KUBERNETES_SERVICE_HOST", "10.96.0.1"}};

const EnvMap kJobSetPod = {{"JOBSET_NAME", "llm"},
                           {"REPLICATED_JOB_NAME", "node"},
                           {"JOB_INDEX", "0"},
                           {"REPLICATED_JOB_REPLICAS", "1"},
                           {"JOB_COMPLETION_INDEX", "3"},
                           {"HOSTNAME", "llm-node-0-3"},
                           {"SHARDGUARD_NNODES", "4"},
                           {"SHARDGUARD_SECRET_FILE", "/etc/sg/s"},
                           {"JOBSET_RESTART_ATTEMPT", "2"}};

const EnvMap kSlurmNode1 = {{"SLURM_JOB_ID", "4242"},     {"SLURM_JOB_NAME", "train"},
                            {"SLURM_NODEID", "1"},        {"SLURM_NNODES", "2"},
                            {"SLURM_LOCALID", "0"},       {"SLURM_JOB_NODELIST", "gpu[07-08]"},
                            {"SLURM_RESTART_COUNT", "3"}, {"SHARDGUARD_SECRET_FILE", "/home/u/s"}};

EnvMap with(EnvMap env, const EnvMap& changes, std::initializer_list<const char*> removed = {}) {
  for (const auto& [k, v] : changes) env[k] = v;
  for (const char* k : removed) env.erase(k);
  return env;
}

// A hostlist expander that records its calls; "gpu[07-08]" -> gpu07, gpu08.
struct FakeScontrol {
  std::vector<std::string> calls;
  SlurmHostnames fn() {
    return [this](std::string_view list) -> Result<std::vector<std::string>> {
      calls.emplace_back(list);
      if (list == "gpu[07-08]") return std::vector<std::string>{"gpu07", "gpu08"};
      return Error(ErrorCode::kIo, "scontrol show hostnames: exit 1: invalid hostlist");
    };
  }
};

Placement placed(const EnvMap& env, const PlacementFlags& flags = {}) {
  FakeScontrol scontrol;
  auto p = resolve_placement(env, flags, scontrol.fn());
  INFO((p.ok() ? std::string("ok") : p.error().message()));
  REQUIRE(p.ok());
  REQUIRE(p->has_value());
  return **p;
}

std::string refused(const EnvMap& env, const PlacementFlags& flags = {}) {
  FakeScontrol scontrol;
  auto p = resolve_placement(env, flags, scontrol.fn());
  REQUIRE_FALSE(p.ok());
  CHECK(p.error().code() == ErrorCode::kInvalid);
  return p.error().message();
}

}  // namespace

TEST_CASE("scheduler env: Kubernetes Indexed Job pod", "[scheduler_env]") {
  SECTION("index 1 of 2: the coordinator is pod 0 under the headless Service") {
    Placement p = placed(kIndexedPod1);
    CHECK(p.scheduler == Scheduler::kKubernetesIndexedJob);
    CHECK(p.node_rank == 1u);
    CHECK(p.nnodes == NodeCount{2, 2});
    CHECK(p.rdzv == Endpoint{"trainer-0.trainer", kDefaultKubernetesRdzvPort});
    CHECK(p.job_id_hint == "trainer");
    CHECK(p.secret_file == "/etc/sg/s");
    CHECK_FALSE(p.scheduler_restarts.has_value());
    CHECK_THAT(p.describe(), Catch::Contains("node rank 1 <- JOB_COMPLETION_INDEX") &&
                                 Catch::Contains("HOSTNAME + SHARDGUARD_RDZV_SERVICE"));
  }
  SECTION("a job name ending in digits, elastic node count, own port") {
    Placement p = placed(with(kIndexedPod1, {{"HOSTNAME", "llm-7b-3"},
                                             {"JOB_COMPLETION_INDEX", "3"},
                                             {"SHARDGUARD_NNODES", "2:4"},
                                             {"SHARDGUARD_RDZV_PORT", "29500"}}));
    CHECK(p.node_rank == 3u);
    CHECK(p.nnodes == NodeCount{2, 4});
    CHECK(p.rdzv == Endpoint{"llm-7b-0.trainer", 29500});
    CHECK(p.job_id_hint == "llm-7b");
  }
  SECTION("SHARDGUARD_RDZV_HOST names a coordinator outside the Job") {
    Placement p = placed(with(kIndexedPod1, {{"SHARDGUARD_RDZV_HOST", "127.0.0.1"}}));
    CHECK(p.rdzv == Endpoint{"127.0.0.1", kDefaultKubernetesRdzvPort});
  }
  SECTION("flags win over the environment, field by field") {
    PlacementFlags f;
    f.node_rank = 0;
    f.nnodes = NodeCount{3, 3};
    f.rdzv_endpoint = Endpoint{"10.0.0.5", 1234};
    f.secret_file = "/flag/secret";
    Placement p = placed(kIndexedPod1, f);
    CHECK(p.scheduler == Scheduler::kKubernetesIndexedJob);
    CHECK(p.node_rank == 0u);
    CHECK(p.nnodes == NodeCount{3, 3});
    CHECK(p.rdzv == Endpoint{"10.0.0.5", 1234});
    CHECK(p.secret_file == "/flag/secret");
    CHECK_THAT(p.describe(), Catch::Contains("node rank 0 <- --node-rank"));
  }
}

TEST_CASE("scheduler env: JobSet pod", "[scheduler_env]") {
  SECTION("one Indexed child Job of 4 pods") {
    Placement p = placed(kJobSetPod);
    CHECK(p.scheduler == Scheduler::kJobSet);
    CHECK(p.node_rank == 3u);
    CHECK(p.nnodes == NodeCount{4, 4});
    CHECK(p.rdzv == Endpoint{"llm-node-0-0.llm", kDefaultKubernetesRdzvPort});
    CHECK(p.job_id_hint == "llm");
    CHECK(p.scheduler_restarts == 2u);
  }
  SECTION("two child Jobs of 2 pods: rank = JOB_INDEX x 2 + JOB_COMPLETION_INDEX") {
    Placement p = placed(with(
        kJobSetPod,
        {{"REPLICATED_JOB_REPLICAS", "2"}, {"JOB_INDEX", "1"}, {"JOB_COMPLETION_INDEX", "1"}}));
    CHECK(p.node_rank == 3u);
  }
  SECTION("NonIndexed children, one pod each: the node count is the number of Jobs") {
    Placement p = placed(with(kJobSetPod, {{"REPLICATED_JOB_REPLICAS", "3"}, {"JOB_INDEX", "2"}},
                              {"JOB_COMPLETION_INDEX", "SHARDGUARD_NNODES"}));
    CHECK(p.node_rank == 2u);
    CHECK(p.nnodes == NodeCount{3, 3});
  }
  SECTION("the coordinator annotation, or an own subdomain") {
    CHECK(placed(with(kJobSetPod, {{"JOBSET_COORDINATOR", "llm-lead-0-0.llm"}})).rdzv.host ==
          "llm-lead-0-0.llm");
    CHECK(placed(with(kJobSetPod, {{"SHARDGUARD_RDZV_SERVICE", "net"}})).rdzv.host ==
          "llm-node-0-0.net");
  }
  SECTION("no JOB_INDEX with a single child Job: index 0") {
    CHECK(placed(with(kJobSetPod, {}, {"JOB_INDEX"})).node_rank == 3u);
  }
}

TEST_CASE("scheduler env: Slurm step, one task per node", "[scheduler_env]") {
  SECTION("a bracketed node list goes through scontrol once; port from the job id") {
    FakeScontrol scontrol;
    auto r = resolve_placement(kSlurmNode1, {}, scontrol.fn());
    REQUIRE(r.ok());
    const Placement& p = **r;
    CHECK(p.scheduler == Scheduler::kSlurm);
    CHECK(p.node_rank == 1u);
    CHECK(p.nnodes == NodeCount{2, 2});
    CHECK(p.rdzv == Endpoint{"gpu07", 20000 + 4242});
    CHECK(p.job_id_hint == "train");
    CHECK(p.scheduler_restarts == 3u);
    CHECK(scontrol.calls == std::vector<std::string>{"gpu[07-08]"});
  }
  SECTION("the step's nodes and node list win over the allocation's") {
    FakeScontrol scontrol;
    auto r = resolve_placement(with(kSlurmNode1,
                                    {{"SLURM_NNODES", "4"},
                                     {"SLURM_STEP_NUM_NODES", "2"},
                                     {"SLURM_STEP_NODELIST", "b3,b4"},
                                     {"SLURM_JOB_ID", "123456"}},
                                    {"SLURM_RESTART_COUNT", "SLURM_JOB_NAME"}),
                               {}, scontrol.fn());
    REQUIRE(r.ok());
    CHECK((*r)->nnodes == NodeCount{2, 2});
    CHECK((*r)->rdzv == Endpoint{"b3", 20000 + 3456});
    CHECK((*r)->scheduler_restarts == 0u);  // never requeued yet
    CHECK((*r)->job_id_hint == "slurm-123456");
    CHECK(scontrol.calls.empty());  // a plain list needs no scontrol
  }
  SECTION("--rdzv-endpoint given: scontrol is never run") {
    FakeScontrol scontrol;
    PlacementFlags f;
    f.rdzv_endpoint = Endpoint{"head", 29400};
    auto r = resolve_placement(kSlurmNode1, f, scontrol.fn());
    REQUIRE(r.ok());
    CHECK((*r)->rdzv == Endpoint{"head", 29400});
    CHECK(scontrol.calls.empty());
  }
}

TEST_CASE("scheduler env: by hand, and nothing at all", "[scheduler_env]") {
  SECTION("flags only: no node rank means the first to bind is rank 0") {
    PlacementFlags f;
    f.nnodes = NodeCount{2, 3};
    f.rdzv_endpoint = Endpoint{"::1", 29400};
    Placement p = placed({{"SHARDGUARD_SECRET_FILE", "/s"}}, f);
    CHECK(p.scheduler == Scheduler::kManual);
    CHECK_FALSE(p.node_rank.has_value());
    CHECK(to_string(p.rdzv) == "[::1]:29400");
  }
  SECTION("SHARDGUARD_* variables alone") {
    Placement p = placed({{"SHARDGUARD_NNODES", "2"},
                          {"SHARDGUARD_NODE_RANK", "1"},
                          {"SHARDGUARD_RDZV_HOST", "10.1.2.3"},
                          {"SHARDGUARD_RDZV_PORT", "4000"},
                          {"SHARDGUARD_SECRET_FILE", "/s"}});
    CHECK(p.node_rank == 1u);
    CHECK(p.rdzv == Endpoint{"10.1.2.3", 4000});
  }
  SECTION("single-node runs: no placement") {
    const EnvMap env = GENERATE(
        EnvMap{}, EnvMap{{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"HOSTNAME", "web-5d8f"}},
        EnvMap{{"SHARDGUARD_SECRET_FILE", "/s"}}, EnvMap{{"JOB_COMPLETION_INDEX", ""}});
    auto r = resolve_placement(env, {}, nullptr);
    REQUIRE(r.ok());
    CHECK_FALSE(r->has_value());
  }
  SECTION("a Slurm job of one node is a single-node run: no secret, no coordinator") {
    // What sbatch -N1 + srun gives the shipped script (no SHARDGUARD_SECRET_FILE).
    const EnvMap env = GENERATE(
        EnvMap{{"SLURM_JOB_ID", "7"}, {"SLURM_NNODES", "1"}, {"SLURM_NODEID", "0"}},
        EnvMap{{"SLURM_JOB_ID", "7"}, {"SLURM_NNODES", "4"}, {"SLURM_STEP_NUM_NODES", "1"}});
    auto r = resolve_placement(env, {}, nullptr);
    INFO((r.ok() ? std::string("ok") : r.error().message()));
    REQUIRE(r.ok());
    CHECK_FALSE(r->has_value());
  }
  SECTION("one Slurm node with --nnodes or SHARDGUARD_NNODES is still asked for explicitly") {
    PlacementFlags f;
    f.nnodes = NodeCount{1, 1};
    FakeScontrol scontrol;
    auto r = resolve_placement({{"SLURM_JOB_ID", "7"}, {"SLURM_NNODES", "1"}}, f, scontrol.fn());
    REQUIRE_FALSE(r.ok());  // the multi-node path: its secret is missing, and named
    CHECK(r.error().message().find("secret file") != std::string::npos);
  }
}

TEST_CASE("scheduler env: what is missing is named, all at once", "[scheduler_env]") {
  struct Case {
    const char* what;
    EnvMap env;
    std::vector<const char*> says;
  };
  const Case c = GENERATE(
      Case{"Indexed Job without the SHARDGUARD_* variables",
           with(kIndexedPod1, {},
                {"SHARDGUARD_NNODES", "SHARDGUARD_RDZV_SERVICE", "SHARDGUARD_SECRET_FILE"}),
           {"Kubernetes Indexed Job pod (JOB_COMPLETION_INDEX=1)", "missing node count",
            "SHARDGUARD_NNODES", "SHARDGUARD_RDZV_SERVICE", "SHARDGUARD_SECRET_FILE"}},
      Case{"a hostname the Job controller did not set",
           with(kIndexedPod1, {{"HOSTNAME", "worker"}}),
           {"HOSTNAME must be <job-name>-<JOB_COMPLETION_INDEX>"}},
      Case{"JobSet of 2 Jobs without JOB_INDEX",
           with(kJobSetPod, {{"REPLICATED_JOB_REPLICAS", "2"}}, {"JOB_INDEX"}),
           {"JobSet pod (JOBSET_NAME=llm)", "missing JOB_INDEX"}},
      Case{"JobSet JOB_INDEX 1 without the replica count",
           with(kJobSetPod, {{"JOB_INDEX", "1"}}, {"REPLICATED_JOB_REPLICAS"}),
           {"pods per child Job"}},
      Case{"JobSet without coordinator or replicated job name",
           with(kJobSetPod, {}, {"REPLICATED_JOB_NAME"}),
           {"JOBSET_COORDINATOR"}},
      Case{"Slurm batch shell (no srun)",
           with(kSlurmNode1, {}, {"SLURM_NODEID", "SLURM_NNODES"}),
           {"Slurm job (SLURM_JOB_ID=4242)", "SLURM_NODEID is not set", "SLURM_NNODES is not set"}},
      Case{"scontrol fails",
           with(kSlurmNode1, {{"SLURM_JOB_NODELIST", "gpu[1-"}}),
           {"first host of SLURM_JOB_NODELIST='gpu[1-'", "invalid hostlist"}},
      Case{"by hand: a node count without a coordinator",
           {{"SHARDGUARD_NNODES", "2"}, {"SHARDGUARD_SECRET_FILE", "/s"}},
           {"multi-node run", "--rdzv-endpoint"}},
      Case{"by hand: a host without a port",
           {{"SHARDGUARD_NNODES", "2"},
            {"SHARDGUARD_RDZV_HOST", "h"},
            {"SHARDGUARD_SECRET_FILE", "/s"}},
           {"missing coordinator port"}},
      Case{"by hand: a coordinator without a node count",
           {{"SHARDGUARD_RDZV_ENDPOINT", "h:1"}, {"SHARDGUARD_SECRET_FILE", "/s"}},
           {"missing node count", "--nnodes"}});
  INFO(c.what);
  const std::string message = refused(c.env);
  INFO(message);
  for (const char* s : c.says) CHECK_THAT(message, Catch::Contains(s));
}

TEST_CASE("scheduler env: malformed values are refused with the variable and value",
          "[scheduler_env]") {
  struct Case {
    EnvMap env;
    const char* says;
  };
  const Case c = GENERATE(
      Case{with(kIndexedPod1, {{"JOB_COMPLETION_INDEX", "abc"}}),
           "JOB_COMPLETION_INDEX='abc': not an integer"},
      Case{with(kIndexedPod1, {{"JOB_COMPLETION_INDEX", "-1"}}), "JOB_COMPLETION_INDEX='-1'"},
      Case{with(kIndexedPod1, {{"JOB_COMPLETION_INDEX", " 1"}}), "JOB_COMPLETION_INDEX=' 1'"},
      Case{with(kIndexedPod1, {{"JOB_COMPLETION_INDEX", "99999999999"}}),
           "JOB_COMPLETION_INDEX='99999999999'"},
      Case{with(kIndexedPod1, {{"SHARDGUARD_NNODES", "0"}}),
           "SHARDGUARD_NNODES='0': a job needs at least 1 node"},
      Case{with(kIndexedPod1, {{"SHARDGUARD_NNODES", "3:2"}}),
           "SHARDGUARD_NNODES='3:2': MIN is above MAX"},
      Case{with(kIndexedPod1, {{"SHARDGUARD_NNODES", "2:"}}),
           "SHARDGUARD_NNODES='2:': expected N or MIN:MAX"},
      Case{with(kIndexedPod1, {{"SHARDGUARD_RDZV_PORT", "0"}}), "SHARDGUARD_RDZV_PORT: port 0"},
      Case{with(kIndexedPod1, {{"SHARDGUARD_RDZV_PORT", "70000"}}), "SHARDGUARD_RDZV_PORT='70000'"},
      Case{with(kIndexedPod1, {{"SHARDGUARD_RDZV_ENDPOINT", "::1:29400"}}), "needs brackets"},
      Case{with(kIndexedPod1, {{"SHARDGUARD_RDZV_ENDPOINT", "trainer"}}), "expected HOST:PORT"},
      Case{with(kIndexedPod1, {{"SHARDGUARD_RDZV_ENDPOINT", "[::1]29400"}}),
           "expected [IPV6]:PORT"},
      Case{with(kIndexedPod1, {{"JOB_COMPLETION_INDEX", "2"}, {"HOSTNAME", "trainer-2"}}),
           "node rank 2 (JOB_COMPLETION_INDEX) is not below the node count 2 (SHARDGUARD_NNODES)"},
      Case{with(kJobSetPod, {{"REPLICATED_JOB_REPLICAS", "3"}, {"JOB_INDEX", "1"}}),
           "the node count 4 is not a multiple of REPLICATED_JOB_REPLICAS=3"},
      Case{with(kJobSetPod, {{"JOB_INDEX", "1"}}),
           "JOB_INDEX=1 is not below REPLICATED_JOB_REPLICAS=1"},
      Case{with(kJobSetPod, {{"JOBSET_RESTART_ATTEMPT", "x"}}), "JOBSET_RESTART_ATTEMPT='x'"},
      Case{with(kSlurmNode1, {{"SLURM_LOCALID", "1"}}),
           "SLURM_LOCALID=1: more than one shardguard on this node"},
      Case{with(kSlurmNode1, {{"SLURM_NNODES", "0"}}), "SLURM_NNODES=0"},
      Case{with(kSlurmNode1, {{"SLURM_RESTART_COUNT", "1.5"}}), "SLURM_RESTART_COUNT='1.5'"},
      Case{with(kSlurmNode1, {{"SLURM_JOB_NODELIST", ",gpu1"}}), "no first host"});
  const std::string message = refused(c.env);
  INFO(message);
  CHECK_THAT(message, Catch::Contains(c.says));
}

TEST_CASE("scheduler env: several problems in one message", "[scheduler_env]") {
  const std::string message =
      refused(with(kIndexedPod1, {{"JOB_COMPLETION_INDEX", "x"}, {"SHARDGUARD_RDZV_PORT", "y"}},
                   {"SHARDGUARD_NNODES"}));
  CHECK_THAT(message, Catch::Contains("JOB_COMPLETION_INDEX='x'") &&
                          Catch::Contains("SHARDGUARD_RDZV_PORT='y'") &&
                          Catch::Contains("missing node count"));
}

TEST_CASE("scheduler env: node counts and endpoints parse and print back", "[scheduler_env]") {
  CHECK(parse_node_count("4").value() == NodeCount{4, 4});
  CHECK(parse_node_count("2:4").value() == NodeCount{2, 4});
  CHECK(to_string(NodeCount{2, 4}) == "2:4");
  CHECK(to_string(NodeCount{4, 4}) == "4");
  for (const char* bad : {"", ":", "1:", ":2", "+1", "1 ", "a:b", "1:2:3"}) {
    INFO(bad);
    auto n = parse_node_count(bad);
    REQUIRE_FALSE(n.ok());
    CHECK_THAT(n.error().message(), Catch::StartsWith("--nnodes='"));
  }
  CHECK(parse_endpoint("trainer-0.trainer:29400").value() == Endpoint{"trainer-0.trainer", 29400});
  CHECK(parse_endpoint("[fe80::1]:5").value() == Endpoint{"fe80::1", 5});
  CHECK(to_string(Endpoint{"fe80::1", 5}) == "[fe80::1]:5");
  CHECK(to_string(Endpoint{"h", 1}) == "h:1");
  for (const char* bad : {"h:", ":1", "h:0", "h:65536", "h:1x", "[::1", "[]:1"}) {
    INFO(bad);
    auto e = parse_endpoint(bad);
    REQUIRE_FALSE(e.ok());
    CHECK_THAT(e.error().message(), Catch::StartsWith("--rdzv-endpoint='"));
  }
}

TEST_CASE("scheduler env: environment_snapshot reads this process's environment",
          "[scheduler_env]") {
  ::setenv("SG_SCHEDULER_ENV_TEST", "a=b", 1);
  const EnvMap env = environment_snapshot();
  CHECK(env.at("SG_SCHEDULER_ENV_TEST") == "a=b");
  ::unsetenv("SG_SCHEDULER_ENV_TEST");
}
