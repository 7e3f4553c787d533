// A 3-node job whose nodes share no file system, only a bucket: each node in its own network
// namespace with its own run directory, a Ceph RGW on a fourth namespace (the storage node),
// the checkpoint location s3://BUCKET/job. A node is lost with its disk and comes back as a
// fresh VM that resumes from the bucket; then the node that embeds the coordinator is lost for
// good, a survivor takes over (the bucket's lease, judged by the server's clock) and the job
// ends bit-identical; in between, a node cut off from the RGW during a save (iptables DROP in
// its namespace) fails that save on every rank and the job goes on to an uninterrupted run. Every resume is checked byte for byte against
// the bucket's checkpoint it loaded, and no two epochs commit one step.
// Root only: skips with a warning where namespaces or the RGW cannot be made.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>
#include <thread>

#include "storage/connect.h"
#include "tests/multinode/checks.h"
#include "tests/multinode/cluster.h"
#include "tests/support/command.h"
#include "tests/support/netns.h"
#include "tests/support/proc_tools.h"
#include "tests/support/rgw_cluster.h"

using namespace shardguard;
using namespace shardguard::testing;
using namespace shardguard::testing::multinode;
using namespace std::chrono_literals;

namespace {

constexpr int kStorageNode = 3;
const std::string kBucket = "sg-multinode";

std::string rgw_bin() {
  const char* b = std::getenv("SG_RGW_BIN");
  return b ? b : "sg_rgw";
}

// sg_rgw inside the storage namespace, listening on its loopback and its eth0 address; stopped
// with SIGTERM (which stops the Ceph daemons it started) when this goes away.
struct StorageNode {
  pid_t pid = -1;
  std::string log;
  uint16_t port = 0;
  std::string access_key, secret_key;

  ~StorageNode() {
    if (pid <= 0) return;
    ::kill(pid, SIGTERM);
    for (int i = 0; i < 300; ++i) {
      if (::waitpid(pid, nullptr, WNOHANG) == pid) return;
      std::this_thread::sleep_for(100ms);
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

// Starts the RGW and waits (up to 120 s) for its "listening" line.
void start_storage(NetnsNetwork& net, const std::string& log, StorageNode& node) {
  auto pid =
      net.spawn(kStorageNode,
                {rgw_bin(), "--bucket", kBucket, "--also-listen", net.address(kStorageNode)}, log);
  REQUIRE(pid.ok());
  node.pid = *pid;
  node.log = log;
  const std::regex listening(R"(listening http://127\.0\.0\.1:(\d+)\nAWS_ACCESS_KEY_ID=(\S+) )"
                             R"(AWS_SECRET_ACCESS_KEY=(\S+))");
  std::smatch m;
  const bool up = eventually(
      [&] {
        const std::string text = slurp(log);
        if (!std::regex_search(text, m, listening)) return false;
        node.port = static_cast<uint16_t>(std::stoi(m[1].str()));
        node.access_key = m[2].str();
        node.secret_key = m[3].str();
        return true;
      },
      120000ms);
  INFO(slurp(log));
  REQUIRE(up);
}

}  // namespace

TEST_CASE(
    "Nodes that share only a bucket: a node lost with its disk comes back empty and resumes "
    "from the bucket; the coordinator's node is lost for good, a survivor takes over; the job "
    "ends bit-identical",
    "[multinode][integration][netns][s3]") {
  if (auto why = NetnsNetwork::unavailable_reason()) {
    WARN("SKIPPED: " << *why);
    return;
  }
  if (auto why = RgwCluster::unavailable_reason()) {
    WARN("SKIPPED: " << *why);
    return;
  }
  const auto ip = find_program("ip");
  REQUIRE(ip);
  auto made = NetnsNetwork::create({4, 215, static_cast<int>(::getpid() % 250) + 1});
  REQUIRE(made.ok());
  NetnsNetwork& net = **made;
  TempDir scratch;
  StorageNode storage_node;
  start_storage(net, scratch / "rgw.log", storage_node);
  const std::string endpoint =
      "http://" + net.address(kStorageNode) + ":" + std::to_string(storage_node.port);
  const std::string url = "s3://" + kBucket + "/job";
  const std::vector<std::string> credentials = {"AWS_ACCESS_KEY_ID=" + storage_node.access_key,
                                                "AWS_SECRET_ACCESS_KEY=" + storage_node.secret_key,
                                                "AWS_EC2_METADATA_DISABLED=true"};

  ClusterOptions o;
  o.nodes = 3;
  o.nnodes = "2:3";
  o.checkpoint_dir = url;
  // A successor takes over the coordinator 2 s into its absence; the bucket's lease (the
  // checkpoint location's) is free once the server saw no renewal for 6 s.
  o.job_config = "coordinator_timeout = \"40s\"\n";
  o.extra_config = "[storage]\nendpoint = \"" + endpoint +
                   "\"\naddressing = \"path\"\nallow_http = true\nlease_timeout = \"6s\"\n";
  o.trainer_args = {"--steps", "1200", "--rows", "64", "--log-every", "0", "--sleep-ms", "10"};
  o.address = [&](int k) { return net.address(k); };
  o.rdzv_host = net.address(0);
  o.wrap = [&](int k, std::vector<std::string> argv) {
    std::vector<std::string> out = {*ip, "netns", "exec", net.name(k), "env"};
    out.insert(out.end(), credentials.begin(), credentials.end());
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  };
  Cluster c(o);
  INFO("the RGW's log: " << storage_node.log);
  c.start_all();
  REQUIRE(wait_event_type(c, "checkpoint_committed", 90s));

  // Node 1's VM is reclaimed: its processes and its disk (the run directory) are gone.
  c.kill_node(1);
  std::filesystem::remove_all(c.run_dir(1));
  const auto shrunk = wait_event_type(c, "launch", 30s, 1);
  REQUIRE(shrunk);
  CHECK(field(*shrunk, "nodes") == "0,2");
  REQUIRE(wait_event(
      c,
      [&](const EventRecord& e) {
        return e.type == "checkpoint_committed" && field(e, "attempt") == field(*shrunk, "attempt");
      },
      60s));
  // A fresh VM in its place: an empty disk, the same bucket.
  c.start(1);
  const auto grown = wait_event_type(c, "launch", 60s, 2);
  REQUIRE(grown);
  CHECK(field(*grown, "nodes") == "0,1,2");
  REQUIRE(wait_event(
      c,
      [&](const EventRecord& e) {
        return e.type == "checkpoint_committed" && field(e, "attempt") == field(*grown, "attempt");
      },
      60s));

  // Node 2 is cut off from the storage node (its packets to the RGW dropped) while the job
  // saves: node 2's rank cannot finish its part, so that save fails on every rank within
  // seconds (no collective timeout waited out), the job trains on without a relaunch, and once
  // the network heals the next save commits.
  const std::vector<std::string> drop = {"iptables", "-w", "-I", "OUTPUT", "-d",
                                         net.address(kStorageNode), "-j", "DROP"};
  const int64_t cut_ms = wall_ms_now();
  auto cut = net.exec(2, drop, 20s);
  REQUIRE(cut.ok());
  REQUIRE(cut->exit_code == 0);
  const auto failed = wait_event(
      c, [&](const EventRecord& e) { return e.type == "checkpoint_failed" && e.time_unix_ms >= cut_ms; },
      90s);
  REQUIRE(failed);
  CHECK(field(*failed, "rank") == "2");
  CHECK_THAT(field(*failed, "error"),
             Catch::Contains("stalled") || Catch::Contains("no connection within"));
  // Two tries of the part at the 10 s stall limit, or of the connection at its 10 s timeout.
  CHECK(failed->time_unix_ms - cut_ms < 40'000);
  std::vector<std::string> undrop = drop;
  undrop[2] = "-D";
  auto healed = net.exec(2, undrop, 20s);
  REQUIRE(healed.ok());
  REQUIRE(healed->exit_code == 0);
  const uint64_t failed_step = std::stoull(field(*failed, "step"));
  REQUIRE(wait_event(
      c,
      [&](const EventRecord& e) {
        return e.type == "checkpoint_committed" && std::stoull(field(e, "step")) > failed_step;
      },
      60s));
  CHECK(of_type(c.node_events(0), "launch").size() == 3);  // no relaunch for a failed save
  for (const auto& e : of_type(c.node_events(0), "checkpoint_committed"))
    CHECK(std::stoull(field(e, "step")) != failed_step);

  // The coordinator's node is lost for good: a survivor takes over from the record in the
  // bucket. Nodes 1 and 2 may race for it; the location's lease lets exactly one win.
  c.kill_node(0);
  int successor = -1;
  const bool took_over = eventually(
      [&] {
        for (int k : {1, 2})
          if (!of_type(c.node_events(k), "takeover").empty()) successor = k;
        return successor > 0;
      },
      30000ms);
  REQUIRE(took_over);
  CHECK(c.wait(1, 240s) == 0);
  CHECK(c.wait(2, 60s) == 0);
  CHECK(of_type(c.node_events(3 - successor), "takeover").empty());
  bool survivors = false;
  for (const auto& e : of_type(c.node_events(successor), "launch"))
    survivors = survivors || field(e, "nodes") == "1,2";
  CHECK(survivors);

  // The last checkpoint, read from the storage node by the CLI, against an uninterrupted run.
  std::vector<std::string> inspect = {"env", "AWS_ENDPOINT_URL=" + endpoint,
                                      "SHARDGUARD_S3_ALLOW_HTTP=1"};
  inspect.insert(inspect.end(), credentials.begin(), credentials.end());
  inspect.insert(inspect.end(), {shardguard_bin(), "ckpt", "inspect", "--hash", url});
  auto hashed = net.exec(kStorageNode, inspect, 60s);
  REQUIRE(hashed.ok());
  INFO(hashed->err);
  REQUIRE(hashed->exit_code == 0);
  CHECK(hashed->out == row_parallel_reference(o.trainer_args));

  // The history and every resume, read from the bucket by this process inside the storage
  // node (the coordinator's timeline: node 0's, then its successor's after the takeover).
  auto events = c.node_events(0);
  for (auto& e : c.node_events(successor)) events.push_back(std::move(e));
  std::stable_sort(events.begin(), events.end(),
                   [](const auto& a, const auto& b) { return a.time_unix_ms < b.time_unix_ms; });
  auto inside = net.enter(kStorageNode);
  REQUIRE(inside.ok());
  {
    auto location = storage::Location::parse(url);
    REQUIRE(location.ok());
    storage::ConnectOptions options;
    options.s3.endpoint = endpoint;
    options.s3.addressing = storage::s3::Addressing::kPath;
    options.s3.allow_http = true;
    options.getenv = [&](std::string_view name) -> std::optional<std::string> {
      if (name == "AWS_ACCESS_KEY_ID") return storage_node.access_key;
      if (name == "AWS_SECRET_ACCESS_KEY") return storage_node.secret_key;
      if (name == "AWS_EC2_METADATA_DISABLED") return "true";
      return std::nullopt;
    };
    auto connection = storage::connect(*location, options);
    REQUIRE(connection.ok());
    storage::Store& store = (*connection)->store();
    CHECK(checkpoints(store).back().step == 1200);
    check_history(events, store);
    const auto dumps = verify_resume_dumps(c.dump_dir(), store);
    CHECK(dumps.size() >= 4);  // node 1 back on an empty disk; nodes 1 and 2 after the takeover
    bool fresh_vm_resumed = false;
    for (const auto& d : dumps) {
      CHECK_THAT(d.manifest, Catch::StartsWith(url + "/"));
      fresh_vm_resumed = fresh_vm_resumed || (d.rank == 1 && d.world_size == 3 && d.attempt > 1);
    }
    CHECK(fresh_vm_resumed);
  }
}
