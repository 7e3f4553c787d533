// Cloud notices end to end: an emulated AWS, GCP or Azure metadata service announces the
// preemption; `shardguard run` must commit an emergency checkpoint before the deadline,
// stop the ranks, exit 75 ("preempted"), and the next run must resume from that step.
// Azure's event must also be acknowledged (StartRequests) once the checkpoint is committed.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "tests/agent/metadata_emulator.h"
#include "tests/run/run_fixture.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

EmulatorScenario scenario_for(const std::string& cloud) {
  EmulatorScenario s;
  s.aws = cloud == "aws";
  s.gcp = cloud == "gcp";
  s.azure = cloud == "azure";
  // Notice 1.5 s after start, machine gone 20 s after that.
  if (cloud == "aws")
    s.timelines[kAwsSpotPath] = {{0, 404, ""},
                                 {1500, 200, R"({"action":"terminate","time":"${rfc3339:+20}"})"}};
  if (cloud == "gcp") s.timelines[kGcpPreemptedPath] = {{0, 200, "FALSE"}, {1500, 200, "TRUE"}};
  if (cloud == "azure")
    s.azure_events.push_back(
        {1500, -1,
         R"({"EventId":"E-1","EventType":"Preempt","ResourceType":"VirtualMachine",)"
         R"("Resources":["sg-test-vm"],"EventStatus":"Scheduled",)"
         R"("NotBefore":"${rfc1123:+20}","Description":"Spot eviction",)"
         R"("EventSource":"Platform","DurationInSeconds":-1})"});
  return s;
}

}  // namespace

TEST_CASE("A cloud preemption notice: emergency checkpoint before the deadline, exit 75, resume",
          "[run][integration]") {
  const std::string cloud = GENERATE(as<std::string>{}, "aws", "gcp", "azure");
  INFO("cloud " << cloud);
  auto emulator = MetadataEmulator::start(scenario_for(cloud));
  REQUIRE(emulator.ok());
  RunDirs d;
  // No [agent] clouds: the default ("auto") finds the cloud in this machine's DMI data, here
  // a fake one of that cloud (issue 26, item 1); only the URL points at the emulator.
  const std::string dmi = d.tmp / "dmi";
  std::filesystem::create_directories(dmi);
  if (cloud == "aws") std::ofstream(dmi + "/sys_vendor") << "Amazon EC2\n";
  if (cloud == "gcp") std::ofstream(dmi + "/product_name") << "Google Compute Engine\n";
  if (cloud == "azure") {
    std::ofstream(dmi + "/sys_vendor") << "Microsoft Corporation\n";
    std::ofstream(dmi + "/chassis_asset_tag") << "7783-7084-3265-9085-8269-3286-77\n";
  }
  write_config(d, "[agent]\ndmi_dir = \"" + dmi + "\"\n" + cloud + "_url = \"" +
                      (*emulator)->base_url() + "\"\npoll_interval = \"200ms\"\n" +
                      (cloud == "azure" ? "azure_vm_name = \"sg-test-vm\"\n" : ""),
              1000);
  const auto checked = run_command(shardguard_bin() + " run --check-config --config " +
                                   d.config() + " -- true");
  CHECK_THAT(checked.out, Catch::Contains("[agent] clouds = \"auto\": identified from"));
  const std::vector<std::string> train = {"--steps", "100000", "--rows", "64", "--log-every",
                                          "0", "--sleep-ms", "2"};
  {
    Background run(run_argv(d, 2, train), d.log());
    auto code = run.wait(60s);
    INFO(slurp(d.log()));
    REQUIRE(code == 75);
    CHECK_THAT(slurp(d.log()), Catch::Contains("identified from"));
  }
  auto notices = events_named(d, "notice");
  REQUIRE(notices.size() == 1);
  CHECK_THAT(field(notices[0], "reason"), Catch::StartsWith(cloud + "-"));
  const int64_t deadline = std::stoll(field(notices[0], "deadline_unix_ms"));
  auto committed = events_named(d, "checkpoint_committed");
  REQUIRE(committed.size() == 1);  // the emergency one: periodic saves are every 1000 steps
  CHECK(committed[0].time_unix_ms < deadline);
  CHECK_THAT(run_command(shardguard_bin() + " ckpt ls " + d.ckpt()).out,
             Catch::Contains("emergency"));
  if (cloud == "azure") {
    CHECK((*emulator)->wait_for(
        [](const std::vector<RecordedRequest>& reqs) {
          for (const auto& r : reqs)
            if (r.method == "POST" && r.body.find("\"E-1\"") != std::string::npos &&
                r.body.find("StartRequests") != std::string::npos)
              return true;
          return false;
        },
        5s));
  }
  (*emulator)->stop();

  // A new machine: no notice now; the run resumes from the emergency checkpoint.
  write_config(d, "", 1000);
  auto short_train = train;
  short_train[1] = std::to_string(std::stoull(field(committed[0], "step")) + 50);
  Background again(run_argv(d, 2, short_train), d.log());
  REQUIRE(again.wait(60s) == 0);
  auto launches = events_named(d, "launch");
  REQUIRE(launches.size() == 2);
  CHECK(field(launches[1], "resume_step") == field(committed[0], "step"));
}

TEST_CASE("The standalone agent drains a local run when AWS announces the interruption",
          "[run][integration]") {
  auto emulator = MetadataEmulator::start(scenario_for("aws"));
  REQUIRE(emulator.ok());
  RunDirs d;
  write_config(d, "", 1000);  // the run itself watches no cloud
  const std::string agent_config = d.tmp / "agent.toml";
  std::ofstream(agent_config) << "[job]\nrun_dir = \"" << (d.tmp / "agent-run") << "\"\n"
                              << "[agent]\nclouds = \"aws\"\naws_url = \""
                              << (*emulator)->base_url() << "\"\npoll_interval = \"200ms\"\n"
                              << "run_dirs = [\"" << d.run() << "\"]\n";
  const std::vector<std::string> train = {"--steps", "100000", "--rows", "64", "--log-every",
                                          "0", "--sleep-ms", "2"};
  Background run(run_argv(d, 2, train), d.log());
  Background agent({shardguard_bin(), "agent", "--config", agent_config, "--once"},
                   d.tmp / "agent.log");
  auto code = run.wait(60s);
  INFO(slurp(d.log()) << slurp(d.tmp / "agent.log"));
  REQUIRE(code == 75);
  CHECK(agent.wait(10s) == 0);
  CHECK_THAT(slurp(d.tmp / "agent.log"), Catch::Contains("\"kind\":\"spot-interruption\""));
  auto notices = events_named(d, "notice");
  REQUIRE(notices.size() == 1);
  CHECK_THAT(field(notices[0], "reason"), Catch::Contains("aws"));
  CHECK_THAT(run_command(shardguard_bin() + " ckpt ls " + d.ckpt()).out, Catch::Contains("emergency"));
}
