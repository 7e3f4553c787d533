// `shardguard run` with its checkpoints in a bucket (s3://BUCKET/PREFIX on a real Ceph RGW),
// real trainer ranks and real signals:
//   - the demo's story: an emulated AWS notice -> an emergency checkpoint committed in the
//     bucket -> resumed on 3 ranks (resharded) -> a rank SIGKILLed -> relaunched -> final
//     weights bit-identical to an uninterrupted run; awscli lists the bucket and downloads a
//     shard that an independent safetensors reader accepts;
//   - a second supervisor on the same prefix exits 78 and changes nothing;
//   - --check-config probes the bucket, and names a missing one or refused keys (never the
//     secret).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/agent/metadata_emulator.h"
#include "tests/run/run_fixture.h"
#include "tests/storage/s3_rig.h"
#include "tests/support/fault_proxy.h"

using namespace shardguard;
using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

// The rig's keys and endpoint for the child processes (shardguard, its ranks, awscli).
void export_rig_env(S3Rig& rig) {
  for (const auto& [k, v] : rig.cluster().env()) ::setenv(k.c_str(), v.c_str(), 1);
}

struct BucketRun {
  RunDirs dirs;
  std::string url;  // s3://bucket/prefix

  void write_config(const std::string& extra = "", int every_steps = 50) const {
    std::ofstream(dirs.config()) << "[job]\n"
                                 << "checkpoint_dir = \"" << url << "\"\n"
                                 << "run_dir = \"" << dirs.run() << "\"\n"
                                 << "[storage]\npart_size = \"5MiB\"\nmax_inflight = \"20MiB\"\n"
                                 << "[restart]\nbackoff_initial = \"10ms\"\nbackoff_max = \"50ms\"\n"
                                 << "[stop]\nterm_grace = \"2s\"\n"
                                 << "[checkpoint]\nevery_steps = " << every_steps << "\n"
                                 << extra;
  }
};

std::string sg() { return shardguard_bin(); }

// `shardguard run --config ... --check-config -- trainer`.
std::vector<std::string> check_argv(const RunDirs& d) {
  auto argv = run_argv(d, 1, {"--steps", "1"});
  argv.insert(std::find(argv.begin(), argv.end(), "--"), "--check-config");
  return argv;
}

// A command line for run_command() (arguments quoted for /bin/sh).
std::string join_argv(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += (out.empty() ? "" : " ") + q + "'";
  }
  return out;
}

}  // namespace

TEST_CASE("the demo's story with checkpoints in a bucket ends bit-identical", "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  export_rig_env(rig);
  const std::string bucket = rig.new_bucket("demo");
  BucketRun r{{}, "s3://" + bucket + "/runs/llama"};
  const std::vector<std::string> train = {"--steps", "600", "--rows", "96", "--in-dim", "48",
                                          "--log-every", "0", "--sleep-ms", "10"};
  const std::string reference = reference_hash(train);

  EmulatorScenario s;
  s.aws = true;
  s.timelines[kAwsSpotPath] = {{0, 404, ""},
                               {1500, 200, R"({"action":"terminate","time":"${rfc3339:+20}"})"}};
  auto emulator = MetadataEmulator::start(s);
  REQUIRE(emulator.ok());
  r.write_config("[agent]\nclouds = \"aws\"\naws_url = \"" + (*emulator)->base_url() +
                     "\"\npoll_interval = \"200ms\"\n",
                 100);
  {
    Background run(run_argv(r.dirs, 2, train), r.dirs.log());
    const auto code = run.wait(90s);
    INFO(slurp(r.dirs.log()));
    REQUIRE(code == 75);
  }
  (*emulator)->stop();
  auto committed = events_named(r.dirs, "checkpoint_committed");
  REQUIRE_FALSE(committed.empty());
  CHECK_THAT(field(committed.back(), "manifest"), Catch::StartsWith(r.url + "/step-"));
  auto ls = run_command(sg() + " ckpt ls " + r.url);
  INFO(ls.out << ls.err);
  CHECK(ls.exit_code == 0);
  CHECK_THAT(ls.out, Catch::Contains("emergency"));

  // A new machine with 3 ranks resumes from the bucket; rank 1 is SIGKILLed after a commit.
  r.write_config("", 100);
  Background again(run_argv(r.dirs, 3, train), r.dirs.log());
  const auto first_attempt = events_named(r.dirs, "launch").size();
  pid_t victim = 0;
  for (int i = 0; i < 1200 && victim == 0; ++i) {
    std::this_thread::sleep_for(50ms);
    auto launches = events_named(r.dirs, "launch");
    if (launches.size() <= first_attempt) continue;
    const std::string attempt = field(launches.back(), "attempt");
    bool commit_in_attempt = false;
    for (const auto& e : events_named(r.dirs, "checkpoint_committed"))
      commit_in_attempt = commit_in_attempt || field(e, "attempt") == attempt;
    if (!commit_in_attempt) continue;
    for (const auto& e : events_named(r.dirs, "hello"))
      if (field(e, "attempt") == attempt && field(e, "rank") == "1")
        victim = static_cast<pid_t>(std::stol(field(e, "pid")));
  }
  REQUIRE(victim > 0);
  ::kill(victim, SIGKILL);
  const auto code = again.wait(120s);
  INFO(slurp(r.dirs.log()));
  REQUIRE(code == 0);
  auto launches = events_named(r.dirs, "launch");
  REQUIRE(launches.size() >= 3);
  CHECK(field(launches[1], "nproc") == "3");  // resharded from 2
  CHECK(final_hash(r.url) == reference);
  auto verify = run_command(sg() + " ckpt verify --full " + r.url);
  INFO(verify.out << verify.err);
  CHECK(verify.exit_code == 0);

  // What an independent client sees: the objects, and a shard a plain reader accepts.
  auto listed = rig.cluster().aws({"s3", "ls", "--recursive", "s3://" + bucket + "/runs/llama/"});
  REQUIRE(listed.ok());
  INFO(listed->out);
  CHECK_THAT(listed->out, Catch::Contains("/manifest.json"));
  CHECK_THAT(listed->out, Catch::Contains("shard-00002-of-00003.safetensors"));
  std::string shard_key;
  std::istringstream lines(listed->out);
  for (std::string line; std::getline(lines, line);)
    if (line.find("shard-00000-of-00003.safetensors") != std::string::npos)
      shard_key = line.substr(line.rfind(' ') + 1);
  REQUIRE_FALSE(shard_key.empty());
  const std::string local = r.dirs.tmp / "shard.safetensors";
  auto copied = rig.cluster().aws({"s3", "cp", "s3://" + bucket + "/" + shard_key, local});
  REQUIRE(copied.ok());
  REQUIRE(copied->exit_code == 0);
  auto read = run_command(std::string("/usr/bin/python3 ") + SG_ST_READ_PY + " " + local);
  INFO(read.out << read.err);
  CHECK(read.exit_code == 0);
  CHECK_THAT(read.out, Catch::Contains("F32"));
}

TEST_CASE("a second supervisor on the same prefix exits 78 and changes nothing", "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  export_rig_env(rig);
  const std::string bucket = rig.new_bucket("twin");
  BucketRun first{{}, "s3://" + bucket + "/job"};
  first.write_config("", 50);
  const std::vector<std::string> train = {"--steps", "100000", "--rows", "32", "--log-every", "0",
                                          "--sleep-ms", "5"};
  Background run(run_argv(first.dirs, 2, train), first.dirs.log());
  for (int i = 0; i < 400 && events_named(first.dirs, "checkpoint_committed").empty(); ++i)
    std::this_thread::sleep_for(50ms);
  REQUIRE_FALSE(events_named(first.dirs, "checkpoint_committed").empty());
  auto before = rig.store(bucket, "job")->read(".shardguard/lease", 1 << 20);
  REQUIRE(before.ok());

  BucketRun second{{}, first.url};
  second.write_config("", 50);
  auto twin = run_command(join_argv(run_argv(second.dirs, 1, train)));
  INFO(twin.out << twin.err);
  CHECK(twin.exit_code == 78);
  CHECK_THAT(twin.err, Catch::Contains("is in use by job"));
  CHECK_THAT(twin.err, Catch::Contains(first.url));
  // The first run's lease is as it was, and the run goes on.
  auto lease = rig.store(bucket, "job")->read(".shardguard/lease", 1 << 20);
  REQUIRE(lease.ok());
  CHECK(lease->find("\"pid\":") != std::string::npos);
  CHECK_FALSE(run.wait(0ms).has_value());
  run.signal(SIGTERM);  // a notice: the emergency checkpoint, then 75
  CHECK(run.wait(60s) == 75);
}

TEST_CASE("--check-config reaches and probes the bucket, and names what is wrong",
          "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  export_rig_env(rig);
  const std::string bucket = rig.new_bucket("probe");
  BucketRun r{{}, "s3://" + bucket + "/p"};
  r.write_config();
  auto ok = run_command(join_argv(check_argv(r.dirs)));
  INFO(ok.out << ok.err);
  REQUIRE(ok.exit_code == 0);
  CHECK_THAT(ok.out, Catch::Contains("reachable"));
  CHECK_THAT(ok.out, Catch::Contains("endpoint " + rig.cluster().endpoint()));
  CHECK_THAT(ok.out, Catch::Contains("credentials from environment"));

  SECTION("a missing bucket") {
    BucketRun missing{{}, "s3://sg-no-such-bucket-x/p"};
    missing.write_config();
    auto bad = run_command(join_argv(check_argv(missing.dirs)));
    CHECK(bad.exit_code == 2);
    CHECK_THAT(bad.err, Catch::Contains("sg-no-such-bucket-x"));
    CHECK_THAT(bad.err, Catch::Contains("does not exist"));
  }
  SECTION("refused keys, without the secret") {
    ::setenv("AWS_SECRET_ACCESS_KEY", "not-the-right-secret-42", 1);
    auto bad = run_command(join_argv(check_argv(r.dirs)));
    export_rig_env(rig);
    CHECK(bad.exit_code == 2);
    CHECK_THAT(bad.err, Catch::Contains("403"));
    CHECK_THAT(bad.err, Catch::Contains("refused"));
    CHECK(bad.err.find("not-the-right-secret-42") == std::string::npos);
    CHECK(bad.out.find("not-the-right-secret-42") == std::string::npos);
  }
  SECTION("plain http to a host that is not loopback is refused") {
    BucketRun far{{}, r.url};
    std::ofstream(far.dirs.config())
        << "[job]\ncheckpoint_dir = \"" << r.url << "\"\nrun_dir = \"" << far.dirs.run()
        << "\"\n[storage]\nendpoint = \"http://203.0.113.7:7480\"\n";
    auto bad = run_command(join_argv(check_argv(far.dirs)));
    CHECK(bad.exit_code == 2);
    CHECK_THAT(bad.err, Catch::Contains("plain http"));
    CHECK_THAT(bad.err, Catch::Contains("allow_http = true in [storage]"));
  }
}

TEST_CASE("every shardguard ckpt subcommand works on s3://", "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  export_rig_env(rig);
  const std::string bucket = rig.new_bucket("cli");
  BucketRun r{{}, "s3://" + bucket + "/c"};
  r.write_config("keep_last = 0\n", 100);
  const std::vector<std::string> train = {"--steps", "300", "--rows", "64", "--in-dim", "32",
                                          "--log-every", "0"};
  auto run = run_command(join_argv(run_argv(r.dirs, 2, train)));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  auto sgc = [&](const std::string& args) {
    auto res = run_command(sg() + " ckpt " + args);
    UNSCOPED_INFO("ckpt " << args << " -> " << res.exit_code << "\n" << res.out << res.err);
    return res;
  };
  auto ls = sgc("ls --json " + r.url);
  REQUIRE(ls.exit_code == 0);
  CHECK_THAT(ls.out, Catch::Contains("\"step\":300"));
  CHECK_THAT(ls.out, Catch::Contains("\"step\":100"));
  CHECK(sgc("verify --full " + r.url).exit_code == 0);
  CHECK(sgc("verify --full --step 200 " + r.url).exit_code == 0);
  const auto hash = sgc("inspect --hash " + r.url);
  CHECK(hash.exit_code == 0);
  CHECK(hash.out == final_hash(r.url));
  CHECK_THAT(sgc("inspect --json --step 100 " + r.url).out, Catch::Contains("\"step\":100"));

  auto q = sgc("quarantine " + r.url + " --step 300 --reason 'a test'");
  REQUIRE(q.exit_code == 0);
  CHECK_THAT(q.out, Catch::Contains("marked in s3://" + bucket + "/c/quarantine/step-000000300-"));
  auto after = sgc("ls " + r.url);
  CHECK_THAT(after.out, Catch::Contains("QUARANTINED"));
  CHECK_THAT(after.out, Catch::Contains("a test"));
  // The newest complete one is 200 now.
  CHECK_THAT(sgc("verify " + r.url).out, Catch::Contains("step 200: complete"));
  CHECK(sgc("unquarantine " + r.url + " --step 300").exit_code == 0);
  CHECK_THAT(sgc("verify " + r.url).out, Catch::Contains("step 300: complete"));

  const std::string out = r.dirs.tmp / "hf";
  auto exported = sgc("export " + r.url + " --out " + out);
  REQUIRE(exported.exit_code == 0);
  CHECK(std::filesystem::exists(out + "/model.safetensors"));
  auto read = run_command(std::string("/usr/bin/python3 ") + SG_ST_READ_PY + " " + out +
                          "/model.safetensors");
  CHECK(read.exit_code == 0);

  auto dry = sgc("gc " + r.url + " --keep-last 1 --dry-run");
  CHECK(dry.exit_code == 0);
  CHECK_THAT(dry.out, Catch::Contains("remove"));
  auto gc = sgc("gc " + r.url + " --keep-last 1");
  REQUIRE(gc.exit_code == 0);
  CHECK_THAT(gc.out, Catch::Contains("removed 2 checkpoint(s)"));
  CHECK_THAT(gc.out, Catch::Contains("unfinished upload(s)"));
  auto left = sgc("ls --json " + r.url);
  CHECK(left.out.find("\"step\":100") == std::string::npos);
  CHECK_THAT(left.out, Catch::Contains("\"step\":300"));
}

TEST_CASE("a stalled upload on one rank fails that save on every rank; the job goes on",
          "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  export_rig_env(rig);
  const std::string bucket = rig.new_bucket("stall");
  auto proxy = FaultProxy::start("127.0.0.1", rig.cluster().port());
  REQUIRE(proxy.ok());
  // Rank 1's first part of its first save, and its one retry, stall.
  FaultRule stall;
  stall.kind = FaultRule::Kind::kStallRequest;
  stall.method = "PUT";
  stall.path_contains = "shard-00001-of-00002";
  stall.query_contains = "partNumber=1&";
  stall.after_bytes = 64 << 10;
  stall.count = 2;
  const int id = (*proxy)->add(stall);
  BucketRun r{{}, "s3://" + bucket + "/j"};
  std::ofstream(r.dirs.config())
      << "[job]\ncheckpoint_dir = \"" << r.url << "\"\nrun_dir = \"" << r.dirs.run() << "\"\n"
      << "[storage]\nendpoint = \"" << (*proxy)->endpoint() << "\"\npart_size = \"5MiB\"\n"
      << "max_inflight = \"10MiB\"\nstall_timeout = \"2s\"\n"
      << "[restart]\nbackoff_initial = \"10ms\"\n[stop]\nterm_grace = \"2s\"\n"
      << "[checkpoint]\nevery_steps = 100\n";
  // 1024 x 1024 F32 weights and two Adam moments: 6 MiB a rank, two parts each.
  const std::vector<std::string> train = {"--steps", "260", "--rows", "1024", "--in-dim", "1024",
                                          "--log-every", "0", "--sleep-ms", "20"};
  Background run(run_argv(r.dirs, 2, train), r.dirs.log());
  const auto code = run.wait(240s);
  INFO(slurp(r.dirs.log()));
  REQUIRE(code == 0);
  CHECK((*proxy)->applied(id) == 2);
  auto failed = events_named(r.dirs, "checkpoint_failed");
  REQUIRE_FALSE(failed.empty());
  CHECK(field(failed.front(), "step") == "100");
  CHECK(field(failed.front(), "rank") == "1");
  CHECK_THAT(field(failed.front(), "error"), Catch::Contains("stalled"));
  // Within seconds of the save's start (step 100 at ~2 s of training), not after a timeout:
  // two tries of a 2 s stall, each noticed within curl's window.
  const auto launch = events_named(r.dirs, "launch");
  REQUIRE_FALSE(launch.empty());
  CHECK(failed.front().time_unix_ms - launch.front().time_unix_ms < 25'000);
  auto committed = events_named(r.dirs, "checkpoint_committed");
  std::vector<std::string> steps;
  for (const auto& e : committed) steps.push_back(field(e, "step"));
  CHECK(std::find(steps.begin(), steps.end(), "100") == steps.end());
  CHECK(std::find(steps.begin(), steps.end(), "200") != steps.end());
  // One launch: the job trained on through the failed save.
  CHECK(events_named(r.dirs, "launch").size() == 1);
  auto verify = run_command(sg() + " ckpt verify --full " + r.url);
  CHECK(verify.exit_code == 0);
}
