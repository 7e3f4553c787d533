// Findings of "Root and the file system" and "output" against `shardguard ckpt`, driven as
// a user would, as root where the machine allows, with what an unprivileged user (made by
// the test) plants in a checkpoint or output directory it owns:
//   - a shard linked to a root-only file: verify, inspect, export refuse it, naming it;
//   - a step directory linked elsewhere: gc deletes nothing through it;
//   - export's temp name planted as a link: no file outside --out is written;
//   - a FIFO or /dev/zero where a regular file is expected: refused at once;
//   - a shard whose header does not parse passes neither verify --full nor export (exit 3);
//   - manifest and reason strings reach the terminal escaped.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "checkpoint/quarantine.h"
#include "tests/hardening/ckpt_fixture.h"
#include "tests/hardening/spawn.h"
#include "tests/hardening/temp_user.h"
#include "tests/support/command.h"

using namespace shardguard;
using namespace shardguard::testing;
namespace stdfs = std::filesystem;

namespace {

constexpr const char* kShard = "shard-00000-of-00002.safetensors";

SpawnResult ckpt(std::vector<std::string> args) {
  args.insert(args.begin(), {shardguard_bin(), "ckpt"});
  SpawnOptions o;
  o.timeout = std::chrono::seconds(20);
  return spawn(args, o);
}

// Gives `dir` (recursively) to the user, and lets the user reach it.
void give_to(const TemporaryUser& user, const TempDir& tmp, const std::string& dir) {
  REQUIRE(::chmod(tmp.path().c_str(), 0711) == 0);
  REQUIRE(run_command("chown -R " + std::to_string(user.uid()) + ":" + std::to_string(user.gid()) +
                      " " + shell_word(dir))
              .exit_code == 0);
}

// Runs `command` as the user when there is one, else as this process (the refusals do not
// depend on who planted the link; root reading through it is what the findings are about).
void plant(const TemporaryUser& user, const std::string& command) {
  const auto r =
      run_command((user.ok() ? user.as_user() : "") + "/bin/sh -c " + shell_word(command));
  REQUIRE(r.exit_code == 0);
}

void skip_note(const TemporaryUser& user) {
  if (!user.ok()) WARN("planting as this process, not as another user: " << user.why());
}

}  // namespace

TEST_CASE("a shard linked to a root-only file is refused by verify, inspect and export",
          "[integration]") {
  TemporaryUser user("s");
  skip_note(user);
  TempDir tmp;
  const std::string ckpt_dir = tmp / "ckpt";
  const std::string step = committed_step(ckpt_dir, 100);
  // The shard moves into a root-only directory (the manifest still matches its bytes: what
  // root would leak is exactly what the manifest lists); the user links it back in.
  stdfs::create_directories(tmp / "private");
  REQUIRE(::chmod((tmp / "private").c_str(), 0700) == 0);
  stdfs::rename(step + "/" + kShard, tmp / "private/secret");
  REQUIRE(::chmod((tmp / "private/secret").c_str(), 0600) == 0);
  if (user.ok()) give_to(user, tmp, ckpt_dir);
  plant(user,
        "ln -s " + shell_word(tmp / "private/secret") + " " + shell_word(step + "/" + kShard));
  const std::string link_named = "'" + step + "/" + kShard + "' is a symbolic link";

  SECTION("verify --full") {
    auto r = ckpt({"verify", "--full", ckpt_dir});
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.err, Catch::Contains(link_named));
  }
  SECTION("inspect --hash") {
    auto r = ckpt({"inspect", "--hash", ckpt_dir});
    CHECK(r.exit_code == 3);
    CHECK(r.out.empty());
    CHECK_THAT(r.err, Catch::Contains(link_named));
  }
  SECTION("export") {
    auto r = ckpt({"export", ckpt_dir, "--out", tmp / "hf"});
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.err, Catch::Contains(link_named));
    CHECK_FALSE(stdfs::exists(tmp / "hf/model.safetensors"));
  }
  SECTION("ls shows the step as corrupt, saying why") {
    auto r = ckpt({"ls", ckpt_dir});
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Contains("corrupt"));
    CHECK_THAT(r.out, Catch::Contains("is a symbolic link"));
  }
}

TEST_CASE("gc deletes nothing through a step directory linked elsewhere", "[integration]") {
  TemporaryUser user("g");
  skip_note(user);
  TempDir tmp;
  const std::string ckpt_dir = tmp / "ckpt";
  for (uint64_t s : {100, 200, 300}) committed_step(ckpt_dir, s);
  // Someone else's complete checkpoint, outside the directory gc owns.
  const std::string theirs = committed_step(tmp / "elsewhere", 50);
  if (user.ok()) give_to(user, tmp, ckpt_dir);
  plant(user, "ln -s " + shell_word(theirs) + " " + shell_word(ckpt_dir + "/step-000000050"));
  auto r = ckpt({"gc", ckpt_dir, "--keep-last", "1"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(stdfs::exists(theirs + "/manifest.json"));
  CHECK(stdfs::exists(theirs + "/" + kShard));
  CHECK(stdfs::is_symlink(ckpt_dir + "/step-000000050"));
  CHECK_FALSE(stdfs::exists(ckpt_dir + "/step-000000100"));
  CHECK(stdfs::exists(ckpt_dir + "/step-000000300/manifest.json"));
}

TEST_CASE("export never writes through a link planted at its temp name", "[integration]") {
  TemporaryUser user("e");
  skip_note(user);
  TempDir tmp;
  const std::string ckpt_dir = tmp / "ckpt";
  committed_step(ckpt_dir, 100);
  const std::string out = tmp / "out";
  stdfs::create_directories(out);
  if (user.ok()) give_to(user, tmp, out);
  spit(tmp / "victim", "precious root-only bytes");
  REQUIRE(::chmod((tmp / "victim").c_str(), 0600) == 0);
  // The temp name has the exporting process's pid: plant it once that pid is known, before
  // the export runs (an attacker would plant a range of pids).
  SpawnOptions o;
  o.before_exec = [&](pid_t pid) {
    const std::string tmp_name = out + "/model.safetensors.tmp.a0." + std::to_string(pid);
    plant(user, "ln -s " + shell_word(tmp / "victim") + " " + shell_word(tmp_name));
  };
  auto r = spawn({shardguard_bin(), "ckpt", "export", ckpt_dir, "--out", out}, o);
  INFO(r.out << r.err);
  CHECK(slurp(tmp / "victim") == "precious root-only bytes");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("symbolic link"));
  // Without a planted name the same export works, and its file is the job's, not world's.
  auto again = ckpt({"export", ckpt_dir, "--out", tmp / "out2"});
  CHECK(again.exit_code == 0);
  struct stat st {};
  REQUIRE(::stat((tmp / "out2/model.safetensors").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
}

TEST_CASE("a FIFO or /dev/zero where a regular file is expected is refused at once",
          "[integration]") {
  TempDir tmp;
  const std::string ckpt_dir = tmp / "ckpt";
  const std::string older = committed_step(ckpt_dir, 100);
  const std::string newer = committed_step(ckpt_dir, 200);
  SECTION("a FIFO for manifest.json: ls and resume selection fall back past it") {
    stdfs::remove(newer + "/manifest.json");
    REQUIRE(::mkfifo((newer + "/manifest.json").c_str(), 0644) == 0);
    auto r = ckpt({"ls", ckpt_dir});
    CHECK(r.exit_code == 0);
    CHECK(r.seconds < 5);
    CHECK_THAT(r.out, Catch::Contains("a FIFO"));
    auto v = ckpt({"verify", ckpt_dir});
    CHECK(v.exit_code == 0);  // the newest complete one is step 100
    CHECK_THAT(v.out, Catch::Contains("step 100: complete"));
  }
  SECTION("a FIFO for a shard") {
    stdfs::remove(newer + "/" + kShard);
    REQUIRE(::mkfifo((newer + "/" + kShard).c_str(), 0644) == 0);
    auto r = ckpt({"verify", "--full", "--step", "200", ckpt_dir});
    CHECK(r.exit_code == 3);
    CHECK(r.seconds < 5);
    CHECK_THAT(r.err, Catch::Contains("a FIFO"));
  }
  SECTION("/dev/zero linked in for a shard") {
    stdfs::remove(newer + "/" + kShard);
    stdfs::create_symlink("/dev/zero", newer + "/" + kShard);
    auto r = ckpt({"inspect", "--hash", "--step", "200", ckpt_dir});
    CHECK(r.exit_code == 3);
    CHECK(r.seconds < 5);
    CHECK(r.max_rss_kib < 256 << 10);
    CHECK_THAT(r.err, Catch::Contains("symbolic link"));
  }
  (void)older;
}

TEST_CASE("a shard whose header does not parse fails verify --full and export with 3",
          "[integration]") {
  TempDir tmp;
  const std::string ckpt_dir = tmp / "ckpt";
  const std::string step = committed_step(ckpt_dir, 100);
  // Sizes and checksums in the manifest match the new bytes: only the header is wrong.
  const std::string header = GENERATE(as<std::string>{}, R"({"w": not json)",
                                      R"({"other":{"dtype":"F32","shape":[0],)"
                                      R"("data_offsets":[0,0]}})");
  replace_header(step, header);
  auto quick = ckpt({"verify", ckpt_dir});
  CHECK(quick.exit_code == 0);  // sizes only: the header is read by --full
  auto full = ckpt({"verify", "--full", ckpt_dir});
  CHECK(full.exit_code == 3);
  CHECK_THAT(full.err, Catch::Contains(kShard));
  auto exported = ckpt({"export", ckpt_dir, "--out", tmp / "hf"});
  CHECK(exported.exit_code == 3);
  CHECK_THAT(exported.err, Catch::Contains(kShard));
}

TEST_CASE("manifest and reason strings reach the terminal escaped", "[integration]") {
  TempDir tmp;
  const std::string ckpt_dir = tmp / "ckpt";
  const std::string step = committed_step(ckpt_dir, 100);
  committed_step(ckpt_dir, 200);
  const std::string evil = "job\x1b[2J\x1b[31m\nstep 999 complete\r\xe2\x80\xae";
  auto m = detail::read_manifest(step);
  m.job_id = evil;
  m.global.user = "\"\\u001b]0;title\\u0007\"";  // JSON text holding an OSC sequence
  detail::write_manifest(step, m);
  REQUIRE(checkpoint::quarantine_step(PosixFilesystem::instance(), ckpt_dir, 200,
                                      "bad\x1b[2J\nforged line", WallTime{}, "who\x1b[0m")
              .ok());
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"inspect", "--step", "100", ckpt_dir}, {"ls", ckpt_dir}}) {
    auto r = ckpt(args);
    INFO(args[0] << ":\n" << r.out << r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out.find('\x1b') == std::string::npos);
    CHECK(r.out.find('\r') == std::string::npos);
    CHECK(r.out.find("\xe2\x80\xae") == std::string::npos);
    CHECK(r.out.find("\nstep 999") == std::string::npos);
    CHECK(r.out.find("\nforged") == std::string::npos);
  }
  CHECK_THAT(ckpt({"inspect", "--step", "100", ckpt_dir}).out, Catch::Contains("job\\x1b[2J"));
  CHECK_THAT(ckpt({"ls", ckpt_dir}).out, Catch::Contains("bad\\x1b[2J\\nforged line"));
}
