// The RGW fixture against real clients: awscli round trips, a conditional create (curl,
// SigV4-signed), rclone through the fixture's remote, a radosgw crash and restart, two
// clusters side by side, and nothing left behind by the destructor or by a dead owner.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <random>
#include <thread>

#include "tests/support/rgw_cluster.h"
#include "tests/support/temp_dir.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

#define SG_RGW_OR_SKIP()                               \
  do {                                                 \
    if (auto why = RgwCluster::unavailable_reason()) { \
      WARN("SKIPPED: " << *why);                       \
      return;                                          \
    }                                                  \
  } while (0)

double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

std::string describe(const RgwCluster& c) {
  std::ostringstream s;
  s << "started in " << seconds(c.start_duration()) << " s; RSS";
  uint64_t total = 0;
  for (const auto& [name, bytes] : c.daemon_rss_bytes()) {
    s << " " << name << " " << (bytes >> 20) << " MiB";
    total += bytes;
  }
  s << " (total " << (total >> 20) << " MiB)";
  return s.str();
}

std::unique_ptr<RgwCluster> start_or_fail(RgwOptions options = {}) {
  auto c = RgwCluster::start(std::move(options));
  if (!c.ok()) FAIL("RGW did not start: " << c.error().message());
  return std::move(c).value();
}

// One cluster for the cases that need no fresh one.
RgwCluster& shared() {
  static std::unique_ptr<RgwCluster> c = [] {
    auto started = start_or_fail();
    std::cout << "rgw (memstore): " << describe(*started) << "\n";
    return started;
  }();
  return *c;
}

// Compared as one bool: Catch would print megabytes of binary on a mismatch.
bool same_bytes(const std::string& a, const std::string& b) { return a == b; }

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (auto& ch : s) ch = static_cast<char>(gen());
  return s;
}

ProcResult aws_ok(const RgwCluster& c, const std::vector<std::string>& args) {
  auto r = c.aws(args);
  REQUIRE(r.ok());
  INFO("aws " << args.at(0) << " " << args.at(1) << ": " << r->err << r->out);
  REQUIRE(r->exit_code == 0);
  return *r;
}

// A SigV4-signed request through curl (curl starts in milliseconds, awscli in ~1.7 s here):
// `upload` set: PUT it with If-None-Match: *, else GET into `out`. Returns the HTTP status.
int curl_s3(const RgwCluster& c, const std::string& curl, const std::string& path,
            const std::string& upload, const std::string& out) {
  std::vector<std::string> argv = {
      curl, "-sS", "-o", out, "-w", "%{http_code}", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
      c.access_key() + ":" + c.secret_key(),
      // curl 7.88 does not send the payload hash S3 requires (added here, it is signed).
      "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"};
  if (!upload.empty()) argv.insert(argv.end(), {"-H", "If-None-Match: *", "-T", upload});
  argv.push_back(c.endpoint() + path);
  auto r = run_process(argv, c.process_env(), 30s);
  REQUIRE(r.ok());
  INFO("curl: " << r->err);
  REQUIRE(r->exit_code == 0);
  return std::atoi(r->out.c_str());
}

}  // namespace

TEST_CASE("rgw: a bucket takes an object, lists it and gives it back byte for byte",
          "[integration]") {
  SG_RGW_OR_SKIP();
  auto& c = shared();
  TempDir tmp;
  const std::string payload = random_bytes(3 << 20, 1);
  spit(tmp / "in", payload);
  REQUIRE(c.create_bucket("sg-roundtrip").ok());
  aws_ok(c, {"s3api", "put-object", "--bucket", "sg-roundtrip", "--key", "ckpt/step-1/shard-0",
             "--body", tmp / "in"});
  const auto list = aws_ok(c, {"s3api", "list-objects-v2", "--bucket", "sg-roundtrip", "--query",
                               "Contents[].[Key,Size]", "--output", "text"});
  CHECK(list.out == "ckpt/step-1/shard-0\t" + std::to_string(payload.size()) + "\n");
  aws_ok(c, {"s3api", "get-object", "--bucket", "sg-roundtrip", "--key", "ckpt/step-1/shard-0",
             tmp / "out"});
  CHECK(same_bytes(slurp(tmp / "out"), payload));
}

TEST_CASE("rgw: rclone reads the bucket through the fixture's remote", "[integration]") {
  SG_RGW_OR_SKIP();
  const auto rclone = find_program("rclone");
  if (!rclone) {
    WARN("SKIPPED: no rclone");
    return;
  }
  auto& c = shared();
  TempDir tmp;
  const std::string payload = random_bytes(100 << 10, 2);
  spit(tmp / "in", payload);
  REQUIRE(c.create_bucket("sg-rclone").ok());
  aws_ok(c, {"s3api", "put-object", "--bucket", "sg-rclone", "--key", "a/b", "--body", tmp / "in"});
  auto ls = run_process({*rclone, "lsf", "-R", "--files-only", "sgrgw:sg-rclone"},
                        c.rclone_process_env("sgrgw"), 30s);
  REQUIRE(ls.ok());
  INFO(ls->err);
  CHECK(ls->exit_code == 0);
  CHECK(ls->out == "a/b\n");
  // The config file written at start names the remote "rgw".
  auto cat =
      run_process({*rclone, "--config", c.dir() + "/rclone.conf", "cat", "rgw:sg-rclone/a/b"},
                  {"AWS_*", "RCLONE_*"}, 30s);
  REQUIRE(cat.ok());
  INFO(cat->err);
  CHECK(cat->exit_code == 0);
  CHECK(same_bytes(cat->out, payload));
}

TEST_CASE("rgw: PutObject with If-None-Match: * answers 412 on an existing key", "[integration]") {
  SG_RGW_OR_SKIP();
  // awscli 2.9.19 has no --if-none-match; curl signs the request itself (--aws-sigv4).
  const auto curl = find_program("curl");
  if (!curl) {
    WARN("SKIPPED: no curl for the conditional PUT");
    return;
  }
  auto& c = shared();
  TempDir tmp;
  spit(tmp / "first", random_bytes(64 << 10, 3));
  spit(tmp / "second", random_bytes(64 << 10, 4));
  REQUIRE(c.create_bucket("sg-conditional").ok());
  const std::string key = "/sg-conditional/manifest";
  CHECK(curl_s3(c, *curl, key, tmp / "first", "/dev/null") == 200);
  CHECK(curl_s3(c, *curl, key, tmp / "second", "/dev/null") == 412);
  // The first one is what the key holds.
  CHECK(curl_s3(c, *curl, key, "", tmp / "out") == 200);
  CHECK(same_bytes(slurp(tmp / "out"), slurp(tmp / "first")));
  CHECK(curl_s3(c, *curl, "/sg-conditional/never-written", "", "/dev/null") == 404);
}

TEST_CASE("rgw: radosgw SIGKILLed and started again answers with the data it had",
          "[integration]") {
  SG_RGW_OR_SKIP();
  auto& c = shared();
  TempDir tmp;
  spit(tmp / "in", random_bytes(1 << 20, 5));
  REQUIRE(c.create_bucket("sg-restart").ok());
  aws_ok(c, {"s3api", "put-object", "--bucket", "sg-restart", "--key", "k", "--body", tmp / "in"});
  const pid_t before = c.rgw_pid();
  REQUIRE(c.kill_rgw().ok());
  CHECK_FALSE(process_alive(before));
  CHECK(c.rgw_pid() == -1);
  CHECK_FALSE(c.rgw_answers());
  const auto t0 = std::chrono::steady_clock::now();
  auto restarted = c.restart_rgw();
  const double took = seconds(std::chrono::steady_clock::now() - t0);
  INFO((restarted.ok() ? "" : restarted.error().message()));
  REQUIRE(restarted.ok());
  std::cout << "rgw restart after SIGKILL answered in " << took << " s\n";
  CHECK(took < 15.0);
  CHECK(c.rgw_pid() > 0);
  CHECK(c.rgw_pid() != before);
  CHECK(c.rgw_answers());
  CHECK_FALSE(c.restart_rgw().ok());  // it runs: a second one is refused
  aws_ok(c, {"s3api", "get-object", "--bucket", "sg-restart", "--key", "k", tmp / "out"});
  CHECK(same_bytes(slurp(tmp / "out"), slurp(tmp / "in")));
  // A metadata write waits for the killed radosgw's watches to expire (the fixture sets the
  // OSD's watch timeout to 5 s; the default 30 s made this take 15 s).
  const auto t1 = std::chrono::steady_clock::now();
  REQUIRE(c.create_bucket("sg-after-restart").ok());
  const double create_took = seconds(std::chrono::steady_clock::now() - t1);
  std::cout << "bucket create after the restart took " << create_took << " s\n";
  CHECK(create_took < 10.0);
}

TEST_CASE("rgw: two clusters run side by side, and the destructor leaves nothing behind",
          "[integration]") {
  SG_RGW_OR_SKIP();
  auto& a = shared();
  // The second one on bluestore (a sparse file), so both stores are exercised.
  RgwOptions bluestore;
  bluestore.store = RgwStore::kBluestore;
  bluestore.store_bytes = 1ull << 30;
  auto b = start_or_fail(bluestore);
  std::cout << "rgw (bluestore): " << describe(*b) << "\n";
  CHECK(a.port() != b->port());
  CHECK(a.dir() != b->dir());
  // The store file lies next to the OSD's directory; bluestore links it in as osd/block.
  CHECK(std::filesystem::is_regular_file(b->dir() + "/osd-block"));
  CHECK(std::filesystem::read_symlink(b->dir() + "/osd/block") == b->dir() + "/osd-block");

  // The same bucket name in both, a key written to one: two separate stores.
  TempDir tmp;
  spit(tmp / "b", "in b");
  REQUIRE(a.create_bucket("sg-twin").ok());
  REQUIRE(b->create_bucket("sg-twin").ok());
  aws_ok(*b, {"s3api", "put-object", "--bucket", "sg-twin", "--key", "k", "--body", tmp / "b"});
  aws_ok(*b, {"s3api", "get-object", "--bucket", "sg-twin", "--key", "k", tmp / "b.out"});
  CHECK(slurp(tmp / "b.out") == "in b");
  const auto in_a = aws_ok(a, {"s3api", "list-objects-v2", "--bucket", "sg-twin", "--query",
                               "length(Contents || `[]`)", "--output", "text"});
  CHECK(in_a.out == "0\n");

  struct Proc {
    pid_t pid;
    std::optional<uint64_t> started;
  };
  std::vector<Proc> procs;
  for (pid_t p : {b->mon_pid(), b->osd_pid(), b->rgw_pid()}) {
    REQUIRE(process_alive(p));
    procs.push_back({p, process_start_time(p)});
  }
  const std::string dir = b->dir();
  b.reset();
  for (const auto& p : procs) {
    INFO("pid " << p.pid);
    CHECK_FALSE((process_alive(p.pid) && process_start_time(p.pid) == p.started));
  }
  if (std::getenv("SHARDGUARD_KEEP_TEST_DIRS") == nullptr)
    CHECK_FALSE(std::filesystem::exists(dir));
  CHECK(a.rgw_answers());  // the other cluster is untouched
}

TEST_CASE("rgw: the daemons die with their owner, and the next start removes its directory",
          "[integration]") {
  SG_RGW_OR_SKIP();
  // A child process starts a cluster and dies without cleaning up, as a crashed test does.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(fds[0]);
    auto c = RgwCluster::start();
    std::string msg = c.ok() ? (*c)->dir() + "\n" + std::to_string((*c)->mon_pid()) + " " +
                                   std::to_string((*c)->osd_pid()) + " " +
                                   std::to_string((*c)->rgw_pid())
                             : "ERROR " + c.error().message();
    (void)!::write(fds[1], msg.data(), msg.size());
    ::_exit(0);  // no destructors
  }
  ::close(fds[1]);
  std::string msg;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, size_t(n));
  ::close(fds[0]);
  int st = 0;
  REQUIRE(::waitpid(child, &st, 0) == child);
  REQUIRE(msg.rfind("ERROR", 0) != 0);
  std::istringstream in(msg);
  std::string dir;
  pid_t pids[3] = {-1, -1, -1};
  in >> dir >> pids[0] >> pids[1] >> pids[2];
  INFO(msg);
  REQUIRE(std::filesystem::exists(dir));
  // PR_SET_PDEATHSIG: the kernel kills them when their owner goes.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  for (pid_t p : pids) {
    while (process_alive(p) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(20ms);
    CHECK_FALSE(process_alive(p));
  }
  RgwCluster::sweep_stale();
  if (std::getenv("SHARDGUARD_KEEP_TEST_DIRS") == nullptr)
    CHECK_FALSE(std::filesystem::exists(dir));
  if (RgwCluster::unavailable_reason() == std::nullopt) CHECK(shared().rgw_answers());
}
