// RgwCluster: making, starting, probing and stopping the Ceph daemons (see rgw_cluster.h).
#include "tests/support/rgw_cluster.h"

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "tests/support/fixture_text.h"
#include "tests/support/temp_dir.h"

namespace shardguard::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* kDirPrefix = "sg-rgw-";
constexpr const char* kAws = "/usr/bin/aws";  // Debian's awscli; `aws` on PATH may be a shim
constexpr const char* kRegion = "us-east-1";
constexpr const char* kUser = "sgtest";

// A random (version 4) UUID: the cluster's fsid and the OSD's uuid.
std::string random_uuid() {
  std::random_device rd;
  std::uniform_int_distribution<int> nibble(0, 15);
  std::string u;
  for (int i = 0; i < 32; ++i) {
    int v = nibble(rd);
    if (i == 12) v = 4;
    if (i == 16) v = 8 | (v & 3);
    if (i == 8 || i == 12 || i == 16 || i == 20) u += '-';
    u += "0123456789abcdef"[v];
  }
  return u;
}

// "pid starttime" of this process: names it for good, even after its pid is reused.
std::string self_identity() {
  const pid_t pid = ::getpid();
  return std::to_string(pid) + " " + std::to_string(process_start_time(pid).value_or(0));
}

// Whether the process that wrote `dir`/owner still runs. A directory without an owner file
// is being set up by someone right now unless it is older than a minute.
bool owner_alive(const std::string& dir) {
  std::istringstream owner(slurp(dir + "/owner"));
  long pid = 0;
  uint64_t start = 0;
  if (!(owner >> pid >> start)) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) return false;
    return ::time(nullptr) - st.st_mtime < 60;
  }
  return process_alive(static_cast<pid_t>(pid)) &&
         process_start_time(static_cast<pid_t>(pid)) == start;
}

// Ceph's daemons and tools by their exact command name: only these are matched by the files
// they hold open below a cluster's directory (a person's `tail -f` of a log is left alone).
// (A plain array: a static std::set could be destroyed before a static cluster's stop() runs.)
bool is_ceph_process(pid_t pid) {
  static constexpr const char* kNames[] = {"ceph-mon",      "ceph-osd", "radosgw",
                                           "radosgw-admin", "ceph",     "monmaptool"};
  const std::string comm = process_comm(pid);
  return std::any_of(std::begin(kNames), std::end(kNames),
                     [&](const char* n) { return comm == n; });
}

std::vector<pid_t> ceph_processes_below(const std::string& dir) {
  auto pids = pids_with_open_file(dir);
  pids.erase(std::remove_if(pids.begin(), pids.end(), [](pid_t p) { return !is_ceph_process(p); }),
             pids.end());
  return pids;
}

// SIGKILLs what `find` returns, again for ones that appeared meanwhile (a few rounds), and
// waits for each to be gone (reaped if it is our child).
void kill_all(const std::function<std::vector<pid_t>()>& find) {
  std::set<pid_t> seen;
  for (int round = 0; round < 5; ++round) {
    bool more = false;
    for (pid_t p : find()) {
      ::kill(p, SIGKILL);
      more |= seen.insert(p).second;
    }
    if (!more) break;
  }
  for (pid_t p : seen) wait_exit(p, 5s);
}

// The HTTP status of `GET /` on 127.0.0.1:port, or -1 when nothing answers within `timeout`.
int http_status(int port, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  auto wait_for = [&](short events) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd, events, 0};
    return left.count() > 0 && ::poll(&p, 1, static_cast<int>(left.count())) == 1 &&
           (p.revents & events) != 0;
  };
  int status = -1;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 ||
      (errno == EINPROGRESS && wait_for(POLLOUT))) {
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    const std::string req = "GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (err == 0 && ::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == ssize_t(req.size())) {
      std::string head;
      char buf[512];
      while (head.find("\r\n") == std::string::npos && wait_for(POLLIN)) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        head.append(buf, static_cast<size_t>(n));
      }
      // "HTTP/1.1 200 OK"
      if (head.rfind("HTTP/", 0) == 0 && head.find(' ') != std::string::npos)
        status = std::atoi(head.c_str() + head.find(' ') + 1);
    }
  }
  ::close(fd);
  return status;
}

// Whether something accepts TCP connections on 127.0.0.1:port (the monitor, once bound).
bool tcp_listening(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

struct ConfSpec {
  const RgwOptions& options;
  std::string dir, fsid;
  int mon_port, rgw_port;
};

std::string render_ceph_conf(const ConfSpec& s) {
  std::ostringstream c;
  c << "[global]\n"
    << "fsid = " << s.fsid << "\n"
    << "mon host = v1:127.0.0.1:" << s.mon_port << "\n"
    << "ms bind msgr2 = false\n"
    // A port taken under the monitor fails its start in ~2 s, not 15 s: then start() retries.
    << "ms bind retry delay = 1\n"
    << "auth cluster required = none\nauth service required = none\n"
    << "auth client required = none\n"
    << "run dir = " << s.dir << "/run\n"
    << "log file = " << s.dir << "/log/$name.log\n"
    << "mon data = " << s.dir << "/mon\n"
    << "osd data = " << s.dir << "/osd\n"
    << "osd pool default size = 1\nosd pool default min size = 1\n"
    << "osd pool default pg num = 8\nosd pool default pgp num = 8\n"
    << "osd pool default pg autoscale mode = off\n"
    << "mon allow pool size one = true\n"
    << "mon warn on pool no redundancy = false\n"
    // The monitor refuses to start below 5% free disk by default: a shared VM can be there.
    << "mon data avail crit = 0\nmon data avail warn = 0\n"
    // radosgw's first start creates ~7 pools, one osdmap epoch each: propose at once.
    << "paxos propose interval = 0.02\npaxos min wait = 0.01\n"
    // A SIGKILLed radosgw leaves its watches on the control objects; every metadata write
    // (bucket create) then waits for them to time out: 15 s with the default 30 s timeout.
    // Live watchers ping on the objecter's tick: tick often enough that theirs never lapse.
    << "osd client watch timeout = 5\nobjecter tick interval = 1\n"
    << "osd crush chooseleaf type = 0\n"
    << "osd crush update on start = false\nosd class update on start = false\n";
  if (s.options.store == RgwStore::kMemory) {
    c << "osd objectstore = memstore\n"
      << "memstore device bytes = " << s.options.store_bytes << "\n";
  } else {
    c << "osd objectstore = bluestore\n"
      << "bluestore block path = " << s.dir << "/osd-block\n"
      << "bluestore block create = true\n"
      << "bluestore block size = " << s.options.store_bytes << "\n"
      << "bluestore block db create = false\nbluestore block wal create = false\n"
      << "bluestore cache autotune = false\nbluestore cache size = 67108864\n"
      << "osd memory target = 1073741824\n";
  }
  c << "\n[client.rgw.sg]\n"
    << "rgw frontends = beast endpoint=127.0.0.1:" << s.rgw_port;
  // Also on addresses of the test's own network namespaces (a storage node that others reach).
  for (const auto& a : s.options.also_listen) c << " endpoint=" << a << ":" << s.rgw_port;
  c << "\n"
    << "rgw data = " << s.dir << "/rgw\n"
    // A deleted object's data is RGW's garbage, collected after rgw_gc_obj_min_wait (2 h by
    // default): a bench that writes and deletes 4 GiB a round filled a 16 GiB OSD (every write
    // then hangs) or, with memstore, grew the OSD to 15 GiB of RAM. Collect it within seconds.
    << "rgw gc obj min wait = 1\nrgw gc processor period = 5\nrgw gc processor max time = 5\n";
  return c.str();
}

std::string upper(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace

std::optional<std::string> RgwCluster::unavailable_reason() {
  if (::geteuid() != 0)
    return "the RGW fixture needs root (it starts ceph-mon, ceph-osd and radosgw)";
  for (const char* p :
       {"ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "ceph", kAws}) {
    if (!find_program(p))
      return std::string("the RGW fixture needs '") + p +
             "' (Debian ceph-mon ceph-osd radosgw ceph-common awscli)";
  }
  return std::nullopt;
}

void RgwCluster::sweep_stale() {
  std::error_code ec;
  std::vector<std::string> stale;
  for (const auto& entry : std::filesystem::directory_iterator(tmp_base(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kDirPrefix, 0) == 0 && entry.is_directory(ec) && !owner_alive(entry.path()))
      stale.push_back(entry.path().string());
  }
  for (const auto& dir : stale) {
    kill_all([&] { return ceph_processes_below(dir); });
    if (std::getenv("SHARDGUARD_KEEP_TEST_DIRS") == nullptr) std::filesystem::remove_all(dir, ec);
  }
}

Result<std::unique_ptr<RgwCluster>> RgwCluster::start(RgwOptions options) {
  if (auto why = unavailable_reason()) return Error(ErrorCode::kUnsupported, *why);
  if (options.store_bytes < (256ull << 20))
    return Error(ErrorCode::kInvalid, "RgwOptions.store_bytes must be at least 256 MiB");
  if (options.access_key.empty() || options.secret_key.size() < 8)
    return Error(ErrorCode::kInvalid, "RgwOptions needs an access key and a secret of 8+ bytes");
  const auto t0 = Clock::now();
  sweep_stale();
  std::optional<Error> last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::unique_ptr<RgwCluster> c(new RgwCluster);
    c->options_ = options;
    c->deadline_ = Clock::now() + options.start_timeout;
    std::string tmpl = tmp_base() + "/" + kDirPrefix + "XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr)
      return Error::from_errno("mkdtemp '" + tmpl + "'", errno);
    c->dir_ = tmpl;
    Status s = c->start_attempt();
    if (s.ok()) {
      c->start_duration_ = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
      return c;
    }
    // A port handed out by free_tcp_port() may be taken by someone else before the daemon
    // binds it: then, and only then, try again with new ports.
    const bool retry = c->port_taken();
    last = std::move(s).error().context("start Ceph RGW in '" + c->dir_ + "'");
    c->stop();
    if (!retry) break;
  }
  return *last;
}

Status RgwCluster::start_attempt() {
  SG_RETURN_IF_ERROR(write_text(dir_ + "/owner", self_identity() + "\n"));
  for (const char* sub : {"mon", "osd", "rgw", "run", "log", "aws"}) {
    std::error_code ec;
    std::filesystem::create_directories(dir_ + "/" + sub, ec);
    if (ec) return Error(ErrorCode::kIo, "mkdir '" + dir_ + "/" + sub + "': " + ec.message());
  }
  SG_ASSIGN_OR_RETURN(mon_port_, free_tcp_port());
  do {
    SG_ASSIGN_OR_RETURN(rgw_port_, free_tcp_port());
  } while (rgw_port_ == mon_port_);
  fsid_ = random_uuid();
  SG_RETURN_IF_ERROR(write_files());
  SG_RETURN_IF_ERROR(start_mon());
  SG_RETURN_IF_ERROR(start_osd());
  SG_RETURN_IF_ERROR(start_rgw());
  return run_step("create the S3 user",
                  {"radosgw-admin", "--conf", conf_path_, "user", "create", "--uid", kUser,
                   "--display-name", "shardguard tests", "--access-key", options_.access_key,
                   "--secret-key", options_.secret_key},
                  &rgw_);
}

Status RgwCluster::write_files() {
  conf_path_ = dir_ + "/ceph.conf";
  SG_RETURN_IF_ERROR(
      write_text(conf_path_, render_ceph_conf({options_, dir_, fsid_, mon_port_, rgw_port_})));
  SG_RETURN_IF_ERROR(write_text(
      dir_ + "/aws/config",
      std::string("[default]\nregion = ") + kRegion + "\ns3 =\n  addressing_style = path\n"));
  SG_RETURN_IF_ERROR(write_text(dir_ + "/aws/credentials",
                                "[default]\naws_access_key_id = " + options_.access_key +
                                    "\naws_secret_access_key = " + options_.secret_key + "\n"));
  return write_text(dir_ + "/rclone.conf", rclone_config("rgw"));
}

Status RgwCluster::start_mon() {
  const std::string monmap = dir_ + "/monmap";
  SG_RETURN_IF_ERROR(run_step("monmaptool",
                              {"monmaptool", "--create", "--fsid", fsid_, "--addv", "a",
                               "[v1:127.0.0.1:" + std::to_string(mon_port_) + "]", monmap},
                              nullptr));
  SG_RETURN_IF_ERROR(
      run_step("ceph-mon --mkfs",
               {"ceph-mon", "--conf", conf_path_, "--mkfs", "-i", "a", "--monmap", monmap}, &mon_));
  SG_RETURN_IF_ERROR(spawn(mon_, {"ceph-mon", "--conf", conf_path_, "-i", "a", "-f"}));
  while (!tcp_listening(mon_port_)) {
    if (!process_alive(mon_.pid)) return daemon_error(mon_, "ceph-mon exited at start");
    if (time_left() <= 0ms) return daemon_error(mon_, "ceph-mon did not listen in time");
    std::this_thread::sleep_for(20ms);
  }
  return ok_status();
}

Status RgwCluster::start_osd() {
  const std::string uuid = random_uuid();
  SG_RETURN_IF_ERROR(run_step("ceph osd new", {"ceph", "osd", "new", uuid}, &mon_));
  SG_RETURN_IF_ERROR(
      run_step("ceph-osd --mkfs",
               {"ceph-osd", "--conf", conf_path_, "-i", "0", "--mkfs", "--osd-uuid", uuid}, &osd_));
  // No host bucket: with chooseleaf type 0 the default rule picks OSDs right under the root.
  SG_RETURN_IF_ERROR(run_step(
      "place osd.0", {"ceph", "osd", "crush", "add", "osd.0", "1.0", "root=default"}, &mon_));
  SG_RETURN_IF_ERROR(spawn(osd_, {"ceph-osd", "--conf", conf_path_, "-i", "0", "-f"}));
  std::string last;
  while (true) {
    if (!process_alive(osd_.pid)) return daemon_error(osd_, "ceph-osd exited at start");
    if (time_left() <= 0ms)
      return daemon_error(osd_, "osd.0 not up in time (ceph osd dump: " + last + ")");
    auto dump =
        ceph_tool({"ceph", "osd", "dump"}, std::min<std::chrono::milliseconds>(time_left(), 20s));
    if (dump.ok()) {
      std::istringstream lines(dump->out + dump->err);
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind("osd.0 ", 0) == 0) last = line.substr(0, 40);
        if (line.rfind("osd.0 up ", 0) == 0) return ok_status();
      }
    }
    std::this_thread::sleep_for(100ms);
  }
}

Status RgwCluster::start_rgw() {
  SG_RETURN_IF_ERROR(spawn(rgw_, {"radosgw", "--conf", conf_path_, "-n", rgw_.name, "-f"}));
  return wait_rgw_http(deadline_);
}

Status RgwCluster::wait_rgw_http(Clock::time_point deadline) {
  while (true) {
    if (!process_alive(rgw_.pid)) {
      wait_exit(rgw_.pid, 1s);
      const Error e = daemon_error(rgw_, "radosgw exited at start");
      rgw_.pid = -1;
      return e;
    }
    if (Clock::now() >= deadline)
      return daemon_error(
          rgw_, "radosgw did not answer HTTP on port " + std::to_string(rgw_port_) + " in time");
    if (http_status(rgw_port_, 500ms) > 0) return ok_status();
    std::this_thread::sleep_for(20ms);
  }
}

Status RgwCluster::spawn(Daemon& d, std::vector<std::string> argv) {
  // SIGKILL, not SIGTERM, when the starting thread ends: see the header (memstore's stop).
  auto pid = spawn_process(argv, {"CEPH_*"}, dir_ + "/log/" + d.name + ".out", SIGKILL);
  if (!pid.ok()) return std::move(pid).error().context("start " + d.name);
  d.pid = *pid;
  return ok_status();
}

Result<ProcResult> RgwCluster::ceph_tool(const std::vector<std::string>& argv,
                                         std::chrono::milliseconds timeout) const {
  std::vector<std::string> full = argv;
  if (argv[0] == "ceph") {
    // Bounded even if the monitor is gone: the CLI would otherwise wait for it for 5 minutes.
    const auto secs = std::max<int64_t>(1, timeout.count() / 1000);
    full.insert(full.begin() + 1,
                {"--conf", conf_path_, "--connect-timeout", std::to_string(secs)});
  }
  return run_process(full, {"CEPH_*"}, timeout);
}

Status RgwCluster::run_step(const std::string& what, const std::vector<std::string>& argv,
                            const Daemon* blame) const {
  const auto left = time_left();
  if (left <= 0ms) return Error(ErrorCode::kTimeout, what + ": the start timeout passed");
  auto r = ceph_tool(argv, std::min<std::chrono::milliseconds>(left, 30s));
  if (!r.ok()) return std::move(r).error().context(what);
  if (r->exit_code == 0 && !r->timed_out) return ok_status();
  std::string msg = what +
                    (r->timed_out ? ": timed out" : ": exit " + std::to_string(r->exit_code)) +
                    ": " + redact(tail(r->err + r->out, 1500));
  if (blame != nullptr) return daemon_error(*blame, msg);
  return Error(r->timed_out ? ErrorCode::kTimeout : ErrorCode::kIo, msg);
}

Error RgwCluster::daemon_error(const Daemon& d, const std::string& what) const {
  return Error(ErrorCode::kIo, what + "\n--- " + d.name + " log (tail) ---\n" + log_tail(d.label));
}

std::chrono::milliseconds RgwCluster::time_left() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
}

bool RgwCluster::port_taken() const {
  for (const Daemon* d : {&mon_, &rgw_})
    for (const char* ext : {".log", ".out"})
      if (slurp(dir_ + "/log/" + d->name + ext).find("Address already in use") !=
          std::string::npos)
        return true;
  return false;
}

std::string RgwCluster::redact(std::string text) const {
  const std::string& secret = options_.secret_key;
  for (size_t at; !secret.empty() && (at = text.find(secret)) != std::string::npos;)
    text.replace(at, secret.size(), "<secret>");
  return text;
}

const RgwCluster::Daemon* RgwCluster::daemon(const std::string& label) const {
  for (const Daemon* d : {&mon_, &osd_, &rgw_})
    if (d->label == label) return d;
  return nullptr;
}

std::string RgwCluster::log_tail(const std::string& label, size_t bytes) const {
  const Daemon* d = daemon(label);
  if (d == nullptr) return "(no daemon '" + label + "')";
  const std::string base = dir_ + "/log/" + d->name;
  return redact(tail(slurp(base + ".log"), bytes) + "\n--- " + d->name +
                " stdout/stderr ---\n" + tail(slurp(base + ".out"), bytes / 2));
}

RgwCluster::~RgwCluster() { stop(); }

void RgwCluster::stop() {
  if (stopped_) return;
  stopped_ = true;
  // radosgw first (it would log errors about the OSD going), then the OSD, then the monitor;
  // then any Ceph tool still holding a file below the directory.
  kill_all([&] {
    std::vector<pid_t> pids;
    for (const Daemon* d : {&rgw_, &osd_, &mon_})
      if (d->pid > 0 && process_alive(d->pid)) pids.push_back(d->pid);
    if (!dir_.empty())
      for (pid_t p : ceph_processes_below(dir_))
        if (std::find(pids.begin(), pids.end(), p) == pids.end()) pids.push_back(p);
    return pids;
  });
  // Reap our children whatever kill_all saw of them.
  for (Daemon* d : {&rgw_, &osd_, &mon_}) {
    if (d->pid > 0) wait_exit(d->pid, 2s);
    d->pid = -1;
  }
  if (std::getenv("SHARDGUARD_KEEP_TEST_DIRS") == nullptr && !dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string RgwCluster::endpoint() const { return "http://127.0.0.1:" + std::to_string(rgw_port_); }

std::map<std::string, std::string> RgwCluster::env() const {
  return {
      {"AWS_ACCESS_KEY_ID", options_.access_key},
      {"AWS_SECRET_ACCESS_KEY", options_.secret_key},
      {"AWS_ENDPOINT_URL", endpoint()},
      {"AWS_REGION", kRegion},
      {"AWS_DEFAULT_REGION", kRegion},
      {"AWS_EC2_METADATA_DISABLED", "true"},
      {"AWS_CONFIG_FILE", dir_ + "/aws/config"},
      {"AWS_SHARED_CREDENTIALS_FILE", dir_ + "/aws/credentials"},
      {"AWS_PAGER", ""},
      {"NO_PROXY", "127.0.0.1,localhost"},
      {"no_proxy", "127.0.0.1,localhost"},
  };
}

std::vector<std::string> RgwCluster::process_env() const {
  std::vector<std::string> e = {"AWS_*"};
  for (const auto& [k, v] : env()) e.push_back(k + "=" + v);
  return e;
}

Result<ProcResult> RgwCluster::aws(const std::vector<std::string>& args,
                                   std::chrono::milliseconds timeout) const {
  std::vector<std::string> argv = {kAws, "--endpoint-url", endpoint()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, process_env(), timeout);
}

Status RgwCluster::create_bucket(const std::string& name) const {
  auto r = aws({"s3api", "create-bucket", "--bucket", name});
  if (!r.ok()) return std::move(r).error().context("create bucket '" + name + "'");
  if (r->exit_code != 0)
    return Error(ErrorCode::kIo, "create bucket '" + name + "': aws exit " +
                                     std::to_string(r->exit_code) + ": " +
                                     redact(tail(r->err + r->out, 1500)));
  return ok_status();
}

std::string RgwCluster::rclone_config(const std::string& remote) const {
  return "[" + remote + "]\ntype = s3\nprovider = Ceph\naccess_key_id = " + options_.access_key +
         "\nsecret_access_key = " + options_.secret_key + "\nendpoint = " + endpoint() +
         "\nregion = " + kRegion + "\nforce_path_style = true\n";
}

std::map<std::string, std::string> RgwCluster::rclone_env(const std::string& remote) const {
  const std::string p = "RCLONE_CONFIG_" + upper(remote) + "_";
  return {
      {"RCLONE_CONFIG", dir_ + "/rclone.conf"},
      {p + "TYPE", "s3"},
      {p + "PROVIDER", "Ceph"},
      {p + "ACCESS_KEY_ID", options_.access_key},
      {p + "SECRET_ACCESS_KEY", options_.secret_key},
      {p + "ENDPOINT", endpoint()},
      {p + "REGION", kRegion},
      {p + "FORCE_PATH_STYLE", "true"},
  };
}

std::vector<std::string> RgwCluster::rclone_process_env(const std::string& remote) const {
  std::vector<std::string> e = {"AWS_*", "RCLONE_*"};
  for (const auto& [k, v] : rclone_env(remote)) e.push_back(k + "=" + v);
  return e;
}

Status RgwCluster::kill_rgw() {
  if (rgw_.pid <= 0 || !process_alive(rgw_.pid))
    return Error(ErrorCode::kNotFound, "radosgw is not running");
  ::kill(rgw_.pid, SIGKILL);
  const bool gone = wait_exit(rgw_.pid, 5s);
  if (!gone)
    return Error(ErrorCode::kTimeout,
                 "radosgw (pid " + std::to_string(rgw_.pid) + ") still there 5 s after SIGKILL");
  rgw_.pid = -1;
  return ok_status();
}

Status RgwCluster::restart_rgw() {
  if (rgw_.pid > 0 && process_alive(rgw_.pid))
    return Error(ErrorCode::kInvalid,
                 "radosgw (pid " + std::to_string(rgw_.pid) + ") is still running");
  SG_RETURN_IF_ERROR(spawn(rgw_, {"radosgw", "--conf", conf_path_, "-n", rgw_.name, "-f"}));
  return wait_rgw_http(Clock::now() + options_.start_timeout);
}

bool RgwCluster::rgw_answers(std::chrono::milliseconds timeout) const {
  return http_status(rgw_port_, timeout) > 0;
}

std::map<std::string, uint64_t> RgwCluster::daemon_rss_bytes() const {
  std::map<std::string, uint64_t> rss;
  for (const Daemon* d : {&mon_, &osd_, &rgw_}) {
    if (d->pid <= 0 || !process_alive(d->pid)) continue;
    std::istringstream status(slurp("/proc/" + std::to_string(d->pid) + "/status"));
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmRSS:", 0) == 0)
        rss[process_comm(d->pid)] = std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  }
  return rss;
}

}  // namespace shardguard::testing
