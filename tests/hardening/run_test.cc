// `shardguard run` over the example trainer, as real processes:
//   - finding: modes came from the umask (umask 000 gave a 0777 run directory and a 0666
//     events.jsonl): every directory is 0750 and every file 0640 under umask 000;
//   - the job's group ([job] group): an on-call engineer in it, and only in it, reads the
//     checkpoints (`ckpt verify --full`) and the timeline (`status`);
//   - a run directory too long for a socket address: the ranks still reach the control
//     socket inside it, and nothing is placed in /tmp;
//   - finding: [log] level / format passed --check-config and did nothing;
//   - finding: shards were opened through links on resume: a step whose shard is linked to
//     a root-only file is skipped, saying why, and the job resumes from the step before;
//   - finding: a FIFO named events.jsonl or processes hung `run` at start, and `status` and
//     `report` blocked on it: each now refuses it, naming it.
#include <sys/stat.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/hardening/spawn.h"
#include "tests/hardening/temp_user.h"
#include "tests/run/run_fixture.h"

using namespace shardguard;
using namespace shardguard::testing;
namespace stdfs = std::filesystem;

namespace {

const std::vector<std::string> kTrain = {
    "--steps", "60", "--rows", "16", "--log-every", "0", "--checkpoint-every", "20"};

// `shardguard run` of a short job with `config_extra` appended to the fixture's config.
SpawnResult run_job(const RunDirs& d, const std::string& config_extra, SpawnOptions o = {},
                    std::vector<std::string> flags = {}) {
  write_config(d, config_extra, 20);
  auto argv = run_argv(d, 2, kTrain);
  argv.insert(argv.begin() + 1, flags.begin(), flags.end());
  o.timeout = std::chrono::seconds(60);
  return spawn(argv, o);
}

struct Entry {
  std::string path;
  mode_t mode;
  gid_t gid;
  bool dir;
};

std::vector<Entry> tree(const std::string& root) {
  std::vector<Entry> out;
  for (const auto& e : stdfs::recursive_directory_iterator(root)) {
    struct stat st {};
    REQUIRE(::lstat(e.path().c_str(), &st) == 0);
    if (S_ISSOCK(st.st_mode)) continue;  // 0600 sockets, removed at exit anyway
    // The supervisor's own record of the processes it launched (io/process_record.h): what
    // a later run sweeps, so it stays owner-only.
    if (e.path().filename() == "processes") {
      CHECK((st.st_mode & 07777) == 0600);
      continue;
    }
    out.push_back({e.path(), st.st_mode & 07777, st.st_gid, S_ISDIR(st.st_mode)});
  }
  struct stat st {};
  REQUIRE(::stat(root.c_str(), &st) == 0);
  out.push_back({root, st.st_mode & 07777, st.st_gid, true});
  return out;
}

}  // namespace

TEST_CASE("umask 000: every directory 0750 and every file 0640", "[integration]") {
  RunDirs d;
  SpawnOptions o;
  o.umask = 0;
  auto r = run_job(d, "", o);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  size_t files = 0;
  for (const std::string& root : {d.run(), d.ckpt()}) {
    for (const auto& e : tree(root)) {
      INFO(e.path);
      CHECK(e.mode == (e.dir ? 0750 : 0640));
      files += e.dir ? 0 : 1;
    }
  }
  CHECK(files >= 12);  // events, logs, lease, three steps of shards, sidecars, manifests
}

TEST_CASE("[job] group: the on-call engineer in it reads checkpoints and the timeline",
          "[integration]") {
  TemporaryUser oncall("o");
  if (!oncall.ok()) {
    WARN("skipped: " << oncall.why());
    return;
  }
  const gid_t group = oncall.make_group();
  REQUIRE(group != 0);
  RunDirs d;
  REQUIRE(::chmod(d.tmp.path().c_str(), 0711) == 0);
  // The fixture's config opens with [job]: the group goes right below it.
  write_config(d, "", 20);
  std::string text = slurp(d.config());
  text.replace(text.find("[job]\n"), 6, "[job]\ngroup = \"" + oncall.group_name() + "\"\n");
  spit(d.config(), text);
  auto run = spawn(run_argv(d, 2, kTrain));
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  for (const std::string& root : {d.run(), d.ckpt()}) {
    for (const auto& e : tree(root)) {
      INFO(e.path);
      CHECK(e.gid == group);
      if (e.dir) CHECK((e.mode & 02000) != 0);  // set-group-ID: the ranks' files inherit it
    }
  }
  auto verify =
      run_command(oncall.as_user() + shardguard_bin() + " ckpt verify --full " + d.ckpt());
  CHECK(verify.exit_code == 0);
  CHECK_THAT(verify.out, Catch::Contains("step 60: complete"));
  auto status = run_command(oncall.as_user() + shardguard_bin() + " status --run-dir " + d.run());
  CHECK(status.exit_code == 0);
  // Someone outside the group reads nothing.
  TemporaryUser outsider("x");
  REQUIRE(outsider.ok());
  auto denied = run_command(outsider.as_user() + shardguard_bin() + " ckpt ls " + d.ckpt());
  CHECK(denied.exit_code != 0);
}

TEST_CASE("a run directory longer than a socket address: ranks still reach it", "[integration]") {
  RunDirs d;
  std::string long_run = d.tmp.path();
  while (long_run.size() < 150) long_run += "/deep-run-directory";
  write_config(d, "", 20);
  std::string text = slurp(d.config());
  text.replace(text.find(d.run()), d.run().size(), long_run);
  spit(d.config(), text);
  auto r = spawn(run_argv(d, 2, kTrain));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto events = supervisor::read_events(long_run + "/events.jsonl");
  REQUIRE(events.ok());
  size_t hellos = 0;
  for (const auto& e : *events) hellos += e.type == "hello";
  CHECK(hellos == 2);  // both ranks spoke on <long run dir>/control.sock
}

TEST_CASE("[log] level and format act; the flags override them", "[integration]") {
  RunDirs d;
  SECTION("level = \"error\" silences the supervisor's info lines") {
    auto quiet = run_job(d, "[log]\nlevel = \"error\"\n");
    REQUIRE(quiet.exit_code == 0);
    CHECK_THAT(quiet.err, !Catch::Contains("launching"));
    auto loud = run_job(d, "[log]\nlevel = \"error\"\n", {}, {"--log-level", "info"});
    REQUIRE(loud.exit_code == 0);
    CHECK_THAT(loud.err, Catch::Contains("launching"));
  }
  SECTION("format = \"json\" makes every line a JSON object") {
    auto r = run_job(d, "[log]\nformat = \"json\"\n");
    REQUIRE(r.exit_code == 0);
    size_t lines = 0;
    std::istringstream in(r.err);
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      INFO(line);
      boost::system::error_code ec;
      auto v = boost::json::parse(line, ec);
      CHECK((!ec && v.is_object()));
      ++lines;
    }
    CHECK(lines > 0);
  }
}

TEST_CASE("resume skips a step whose shard is a link, naming it", "[integration]") {
  RunDirs d;
  write_config(d, "", 20);
  auto first = spawn(run_argv(
      d, 2, {"--steps", "40", "--rows", "16", "--log-every", "0", "--checkpoint-every", "20"}));
  INFO(first.err);
  REQUIRE(first.exit_code == 0);
  const std::string shard = d.ckpt() + "/step-000000040/shard-00000-of-00002.safetensors";
  stdfs::create_directories(d.tmp / "private");
  REQUIRE(::chmod((d.tmp / "private").c_str(), 0700) == 0);
  stdfs::rename(shard, d.tmp / "private/shard");
  stdfs::create_symlink(d.tmp / "private/shard", shard);
  auto again = spawn(run_argv(d, 2, kTrain));
  INFO(again.err);
  REQUIRE(again.exit_code == 0);
  bool skipped = false;
  for (const auto& e : events_named(d, "resume_skipped"))
    skipped = skipped || (field(e, "step") == "40" &&
                          field(e, "why").find("is a symbolic link") != std::string::npos);
  CHECK(skipped);
  auto launches = events_named(d, "launch");
  REQUIRE(launches.size() >= 2);
  CHECK(field(launches.back(), "resume_step") == "20");
}

TEST_CASE(
    "a FIFO put at the name of events.jsonl or processes: run, status and report refuse it "
    "naming it, and never hang",
    "[integration]") {
  for (const std::string& name : {std::string("events.jsonl"), std::string("processes")}) {
    INFO(name);
    RunDirs d;
    stdfs::create_directories(d.run());
    const std::string fifo = d.run() + "/" + name;
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    // Opening a FIFO for writing waited for a reader for ever.
    auto r = run_job(d, "");
    INFO(r.out << r.err);
    CHECK(r.exit_code != -1);  // -1: still running at the timeout
    // Without its events the run cannot start; without its process record it runs on, each
    // failed record named (a later start then has nothing to sweep).
    if (name == "events.jsonl") CHECK(r.exit_code != 0);
    CHECK(r.seconds < 20);
    CHECK_THAT(r.out + r.err, Catch::Contains("'" + fifo + "' is a FIFO, not a regular file"));
    if (name != "events.jsonl") continue;
    for (const char* cmd : {"status", "report"}) {
      INFO(cmd);
      SpawnOptions o;
      o.timeout = std::chrono::seconds(20);
      auto s = spawn({shardguard_bin(), cmd, "--run-dir", d.run()}, o);
      CHECK(s.exit_code != -1);  // -1: still running at the timeout
      CHECK(s.exit_code != 0);
      CHECK_THAT(s.err + s.out, Catch::Contains("is a FIFO, not a regular file"));
    }
  }
}

TEST_CASE(
    "a checkpoint directory others can write that is not the job's, or a .shardguard another "
    "user made in it, is refused with exit 78 naming it",
    "[integration]") {
  TemporaryUser other("p");
  if (!other.ok()) {
    WARN("skipped: " << other.why());
    return;
  }
  SECTION("a 1777 scratch directory of another user as the checkpoint directory") {
    RunDirs d;
    stdfs::create_directories(d.ckpt());
    REQUIRE(::chown(d.ckpt().c_str(), other.uid(), 0) == 0);
    REQUIRE(::chmod(d.ckpt().c_str(), 01777) == 0);
    auto r = run_job(d, "");
    INFO(r.out << r.err);
    CHECK(r.exit_code == 78);
    CHECK_THAT(r.out + r.err,
               Catch::Contains("(mode 1777, owner uid " + std::to_string(other.uid()) +
                               ") can be written by "
                               "others and is not this job's"));
  }
  SECTION("the job's own 0777 directory with a .shardguard that another user made first") {
    RunDirs d;
    stdfs::create_directories(d.ckpt() + "/.shardguard");
    REQUIRE(::chmod(d.ckpt().c_str(), 0777) == 0);
    REQUIRE(::chown((d.ckpt() + "/.shardguard").c_str(), other.uid(), 0) == 0);
    auto r = run_job(d, "");
    INFO(r.out << r.err);
    CHECK(r.exit_code == 78);
    CHECK_THAT(r.out + r.err, Catch::Contains("/.shardguard' (mode") &&
                                  Catch::Contains("whoever made it can rewrite the job's records"));
  }
}

TEST_CASE("a config error that quotes the file's own bytes shows them escaped, never raw",
          "[integration]") {
  RunDirs d;
  // A quoted key with ESC [2J (clear the screen) in it: the error names the key.
  spit(d.config(), "[job]\ncheckpoint_dir = \"" + d.ckpt() + "\"\n\"evil\\u001b[2J\\u202e\" = 1\n");
  auto r = spawn(run_argv(d, 1, kTrain));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("evil\\x1b[2J\\u202e"));
  CHECK(r.err.find('\x1b') == std::string::npos);
  CHECK(r.err.find("\xe2\x80\xae") == std::string::npos);
}
