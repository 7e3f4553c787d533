// RgwCluster: a real S3 server (Ceph RGW 16.2.15, Debian's radosgw) on 127.0.0.1 for
// integration tests of the object-storage code. It writes a private ceph.conf in a temporary
// directory, starts one monitor, one OSD and radosgw (no ceph-mgr: S3 does not need one),
// creates an S3 user with the given keys and stops everything it started by pid. Several
// clusters (parallel ctest, other engineers) run side by side: each has its own directory,
// monitor and HTTP ports (free_tcp_port; a start that finds a port taken retries with new
// ones) and fsid; the OSD picks its own ports in Ceph's 6800-7300 range.
//
// Measured on the 2-core development VM (Ceph 16.2.15, awscli 2.9.19, load average 3-5 from
// other builds): start() returns after 3.2-5.1 s with the memory store and 8.7-11 s with
// bluestore (1 GiB sparse file; ceph-osd --mkfs takes most of it), 7-8 s and 14-16 s when two
// test binaries start clusters at once. Idle RSS: ceph-mon 34 MiB, ceph-osd 44-46 MiB
// (memstore, plus what it stores) or 50-52 MiB (bluestore), radosgw 52 MiB: 132-139 MiB
// together (radosgw grew to ~210 MiB during a 300 MiB upload). radosgw SIGKILLed and started
// again answers HTTP in 0.25-0.3 s (0.7-0.9 s with a second cluster busy); the first bucket
// create after that took 1.2-4.8 s (see the watch timeout below). Each /usr/bin/aws call costs
// ~1.5-2 s of Python start-up; the server's own latencies are milliseconds.
// The test prints its own figures (tests/storage/rgw_fixture_test.cc).
//
// How the cluster is made (docs: /work/shared/reference/object-storage.md, section 3): auth
// is off (auth * required = none); the OSD sends no crush or class update on start (with auth
// off it would do so before it has the monmap, get "wrong fsid" and exit) and is placed under
// root=default by hand; pools have size 1 and 8 PGs; paxos proposes every 20 ms instead of
// every second (radosgw's first start creates its pools one osdmap epoch at a time: 10 s with
// the default); the OSD expires a client's watch after 5 s, not 30 s, with clients pinging every
// second (a SIGKILLed radosgw leaves watches behind, and every bucket create waited ~15 s for
// them). The OSD's store is RgwOptions::store: memstore keeps every object in the OSD's
// RAM (store_bytes bounds it), bluestore uses a sparse file of store_bytes next to the OSD's
// directory (inside it makes a symlink loop).
//
// Stopping is SIGKILL by pid, not SIGTERM first: nothing in the directory is kept, and a
// memstore OSD that is asked to stop writes every object it holds to its directory before it
// exits. The daemons get SIGKILL when the thread that started them ends (PR_SET_PDEATHSIG), so
// a crashed test does not leave them; what is left (the directory) is removed by the next
// start() (sweep_stale()). Directories whose owner still runs are never touched.
//
// awscli 2.9.19 caveats: it ignores AWS_ENDPOINT_URL (aws() passes --endpoint-url), has no
// `put-object --if-none-match`, and crashes on RGW's error replies with an empty <Message>
// ("argument of type 'NoneType' is not iterable", exit 255) instead of naming the S3 error.
//
// Thread-safety: one thread at a time. Start and destroy it on the test's thread (see above).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "tests/support/proc_tools.h"

namespace shardguard::testing {

enum class RgwStore {
  kMemory,     // memstore: objects in the OSD's RAM; fastest start, nothing on disk
  kBluestore,  // bluestore on a sparse file below dir(): disk I/O like a real OSD
};

struct RgwOptions {
  RgwStore store = RgwStore::kMemory;
  uint64_t store_bytes = 2ull << 30;        // the OSD's capacity (memstore: the most RAM it takes)
  std::chrono::seconds start_timeout{60};   // for start() as a whole, and for restart_rgw()
  // radosgw listens on 127.0.0.1 and also on these addresses (of a network namespace the test
  // made and runs the fixture in: the storage node of a multi-node job), on the same port.
  std::vector<std::string> also_listen;
  std::string access_key = "sgtestaccess";  // the S3 user's keys (test-only values)
  std::string secret_key = "sgtestsecret0123456789";
};

class RgwCluster {
 public:
  // Why this machine cannot run the fixture (not root, a program missing), or nullopt.
  static std::optional<std::string> unavailable_reason();

  // Writes the conf, starts the monitor, the OSD and radosgw, creates the S3 user; returns
  // once radosgw answers HTTP. Retries with new ports when one was taken meanwhile. Errors
  // name the step and carry the tail of the failing daemon's log.
  static Result<std::unique_ptr<RgwCluster>> start(RgwOptions options = {});

  // Kills what crashed fixtures left: the Ceph processes holding files open below sg-rgw-*
  // directories in $TMPDIR whose owner process is gone, and removes those directories.
  // start() calls it.
  static void sweep_stale();

  ~RgwCluster();
  RgwCluster(const RgwCluster&) = delete;
  RgwCluster& operator=(const RgwCluster&) = delete;

  // SIGKILLs radosgw, the OSD and the monitor (and any Ceph tool still holding a file below
  // dir()), waits until they are gone and removes the directory (unless
  // SHARDGUARD_KEEP_TEST_DIRS is set). Idempotent.
  void stop();

  std::string endpoint() const;  // "http://127.0.0.1:PORT"
  uint16_t port() const { return static_cast<uint16_t>(rgw_port_); }
  const std::string& access_key() const { return options_.access_key; }
  const std::string& secret_key() const { return options_.secret_key; }
  const std::string& dir() const { return dir_; }
  const RgwOptions& options() const { return options_; }
  // Wall time start() took, the failed attempts included.
  std::chrono::milliseconds start_duration() const { return start_duration_; }

  // The environment for independent S3 clients (awscli, rclone's AWS mode, shardguard):
  // AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_REGION and
  // AWS_DEFAULT_REGION (us-east-1), AWS_EC2_METADATA_DISABLED=true, AWS_CONFIG_FILE and
  // AWS_SHARED_CREDENTIALS_FILE below dir() (the user's ~/.aws is never read), AWS_PAGER="",
  // and NO_PROXY/no_proxy for loopback.
  std::map<std::string, std::string> env() const;
  // env() for run_process()/spawn_process(): "AWS_*" first (drops every inherited AWS_
  // variable, such as a person's AWS_PROFILE), then "K=V" for each entry.
  std::vector<std::string> process_env() const;

  // Runs /usr/bin/aws --endpoint-url endpoint() ARGS with process_env(). Errors only when it
  // cannot be started; the exit code and output are in the result.
  Result<ProcResult> aws(const std::vector<std::string>& args,
                         std::chrono::milliseconds timeout = std::chrono::seconds(60)) const;
  // `aws s3api create-bucket --bucket NAME`; an error with awscli's output if it fails.
  Status create_bucket(const std::string& name) const;

  // rclone.conf text for a remote `remote` (type s3, provider Ceph, this endpoint and keys,
  // path-style requests).
  std::string rclone_config(const std::string& remote = "rgw") const;
  // The same remote as RCLONE_CONFIG_<REMOTE>_* variables, plus RCLONE_CONFIG naming
  // dir()/rclone.conf (written at start with remote "rgw"), so the user's config is never read.
  // Run rclone without inherited AWS_* variables: rclone 1.60 fails on AWS_CA_BUNDLE
  // ("LoadCustomCABundleError: ... transport unsupported type"), even for plain HTTP.
  std::map<std::string, std::string> rclone_env(const std::string& remote = "rgw") const;
  // rclone_env() for run_process()/spawn_process(): "AWS_*" and "RCLONE_*" dropped first.
  std::vector<std::string> rclone_process_env(const std::string& remote = "rgw") const;

  // A crash of the S3 server (mid-save, say): SIGKILL radosgw and wait until it is gone.
  Status kill_rgw();
  // Starts radosgw again on the same port; returns once it answers HTTP (start_timeout).
  // An error if radosgw is still running.
  Status restart_rgw();
  // Whether radosgw answers an HTTP request on port() within `timeout`.
  bool rgw_answers(std::chrono::milliseconds timeout = std::chrono::milliseconds(500)) const;

  pid_t rgw_pid() const { return rgw_.pid; }  // -1 while radosgw is down
  pid_t mon_pid() const { return mon_.pid; }
  pid_t osd_pid() const { return osd_.pid; }
  // Resident memory of each running daemon ("ceph-mon", "ceph-osd", "radosgw"), in bytes.
  std::map<std::string, uint64_t> daemon_rss_bytes() const;

  // The last `bytes` of a daemon's Ceph log and of its stdout/stderr ("mon", "osd", "rgw").
  std::string log_tail(const std::string& daemon, size_t bytes = 3000) const;

 private:
  struct Daemon {
    std::string label;  // "mon", "osd", "rgw"
    std::string name;   // Ceph's entity name: "mon.a", "osd.0", "client.rgw.sg"
    pid_t pid = -1;
  };

  RgwCluster() = default;
  Status start_attempt();
  Status write_files();
  Status start_mon();
  Status start_osd();
  Status start_rgw();
  Status wait_rgw_http(std::chrono::steady_clock::time_point deadline);
  Status spawn(Daemon& d, std::vector<std::string> argv);
  Result<ProcResult> ceph_tool(const std::vector<std::string>& argv,
                               std::chrono::milliseconds timeout) const;
  Status run_step(const std::string& what, const std::vector<std::string>& argv,
                  const Daemon* blame) const;
  Error daemon_error(const Daemon& d, const std::string& what) const;
  std::chrono::milliseconds time_left() const;
  bool port_taken() const;
  std::string redact(std::string text) const;
  const Daemon* daemon(const std::string& label) const;

  RgwOptions options_;
  std::string dir_, conf_path_, fsid_;
  int mon_port_ = 0, rgw_port_ = 0;
  Daemon mon_{"mon", "mon.a"}, osd_{"osd", "osd.0"}, rgw_{"rgw", "client.rgw.sg"};
  std::chrono::steady_clock::time_point deadline_{};
  std::chrono::milliseconds start_duration_{0};
  bool stopped_ = false;
};

}  // namespace shardguard::testing
