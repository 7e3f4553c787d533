// Secret files on a real filesystem: modes, owners, file types, Kubernetes-style symlink
// chains, lengths, the environment variable, and `generate`.
#include "net/secret.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "tests/support/temp_dir.h"

using shardguard::ErrorCode;
using shardguard::testing::spit;
using shardguard::testing::TempDir;
using namespace shardguard::net;
namespace fs = std::filesystem;

namespace {

const std::string kGood(40, 's');

std::string write_secret(const TempDir& dir, const std::string& name, const std::string& text,
                         mode_t mode) {
  const std::string path = dir / name;
  spit(path, text);
  REQUIRE(::chmod(path.c_str(), mode) == 0);
  return path;
}

std::string secret_text(const Secret& s) {
  return {reinterpret_cast<const char*>(s.bytes().data()), s.bytes().size()};
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("Owner-only secret files load; any other mode is refused naming file and mode") {
  TempDir dir;
  SECTION("0400 and 0600 load, one trailing newline stripped") {
    const mode_t mode = GENERATE(mode_t{0400}, mode_t{0600});
    const std::string text = kGood + GENERATE(as<std::string>{}, "", "\n", "\r\n");
    auto s = load_secret_file(write_secret(dir, "key", text, mode));
    INFO((s.ok() ? std::string() : s.error().message()));
    REQUIRE(s.ok());
    CHECK(secret_text(*s) == kGood);
  }
  SECTION("group or other bits, exec or set-id bits are refused") {
    const mode_t mode = GENERATE(mode_t{0644}, mode_t{0640}, mode_t{0604}, mode_t{0440},
                                 mode_t{0700}, mode_t{0200}, mode_t{04600}, mode_t{0660});
    const std::string path = write_secret(dir, "key", kGood, mode);
    auto s = load_secret_file(path);
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().code() == ErrorCode::kInvalid);
    char octal[8];
    std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode));
    CHECK_THAT(s.error().message(), Catch::Contains("'" + path + "'") &&
                                        Catch::Contains(std::string("mode ") + octal) &&
                                        Catch::Contains("0400 or 0600"));
  }
}

TEST_CASE("Secrets shorter than 32 bytes are refused; 32 bytes after the newline is enough") {
  TempDir dir;
  auto short_one = load_secret_file(write_secret(dir, "short", std::string(31, 'x') + "\n", 0600));
  REQUIRE_FALSE(short_one.ok());
  CHECK_THAT(short_one.error().message(), Catch::Contains("short'") &&
                                              Catch::Contains("31 bytes of secret") &&
                                              Catch::Contains("at least 32"));
  auto empty = load_secret_file(write_secret(dir, "empty", "", 0600));
  REQUIRE_FALSE(empty.ok());
  CHECK_THAT(empty.error().message(), Catch::Contains("0 bytes of secret"));
  auto exact = load_secret_file(write_secret(dir, "exact", std::string(32, 'x') + "\n", 0400));
  CHECK(exact.ok());
  auto huge =
      load_secret_file(write_secret(dir, "huge", std::string(kMaxSecretBytes + 1, 'x'), 0600));
  REQUIRE_FALSE(huge.ok());
  CHECK_THAT(huge.error().message(), Catch::Contains("more than the 65536"));
}

TEST_CASE("Kubernetes Secret volume symlinks are followed; the final file is what is checked") {
  TempDir dir;
  // What the kubelet writes: key -> ..data/key, ..data -> ..2024_05_01_12_00_00.123
  fs::create_directory(dir / "..2024_05_01_12_00_00.123");
  write_secret(dir, "..2024_05_01_12_00_00.123/key", kGood + "\n", 0400);
  fs::create_directory_symlink("..2024_05_01_12_00_00.123", dir / "..data");
  fs::create_symlink("..data/key", dir / "key");
  auto s = load_secret_file(dir / "key");
  REQUIRE(s.ok());
  CHECK(secret_text(*s) == kGood);

  SECTION("a world-readable target is refused, naming the link and where it led") {
    REQUIRE(::chmod((dir / "..2024_05_01_12_00_00.123/key").c_str(), 0644) == 0);
    auto bad = load_secret_file(dir / "key");
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(bad.error().message(), Catch::Contains("'" + (dir / "key") + "' (-> '") &&
                                          Catch::Contains("..2024_05_01_12_00_00.123/key'") &&
                                          Catch::Contains("mode 0644"));
  }
  SECTION("a dangling link is not found") {
    fs::remove_all(dir / "..2024_05_01_12_00_00.123");
    auto gone = load_secret_file(dir / "key");
    REQUIRE_FALSE(gone.ok());
    CHECK(gone.error().code() == ErrorCode::kNotFound);
    CHECK_THAT(gone.error().message(), Catch::Contains("'" + (dir / "key") + "'"));
  }
}

TEST_CASE("Directories, FIFOs and missing files are refused with the reason") {
  TempDir dir;
  fs::create_directory(dir / "d");
  REQUIRE(::chmod((dir / "d").c_str(), 0700) == 0);
  auto d = load_secret_file(dir / "d");
  REQUIRE_FALSE(d.ok());
  CHECK_THAT(d.error().message(), Catch::Contains("not a regular file"));

  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  auto f = load_secret_file(dir / "fifo");  // must not block waiting for a writer
  REQUIRE_FALSE(f.ok());
  CHECK_THAT(f.error().message(), Catch::Contains("not a regular file"));

  auto missing = load_secret_file(dir / "nope");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code() == ErrorCode::kNotFound);
  CHECK_THAT(missing.error().message(), Catch::Contains("secret file '" + (dir / "nope") + "'"));
}

TEST_CASE("A file owned by another user is refused (needs root to set up)") {
  if (::geteuid() != 0) {
    WARN("not root: cannot chown a test file to another uid; skipped");
    return;
  }
  TempDir dir;
  const std::string path = write_secret(dir, "theirs", kGood, 0600);
  REQUIRE(::chown(path.c_str(), 65534, 65534) == 0);
  auto s = load_secret_file(path);
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.error().message(),
             Catch::Contains("owned by uid 65534") && Catch::Contains("or root"));
}

TEST_CASE("The secret file comes from the flag, else SHARDGUARD_SECRET_FILE") {
  TempDir dir;
  const std::string from_env = write_secret(dir, "env", std::string(32, 'e'), 0600);
  const std::string from_flag = write_secret(dir, "flag", std::string(32, 'f'), 0600);
  {
    ScopedEnv env(kSecretFileEnv, from_env.c_str());
    auto by_env = load_secret("");
    REQUIRE(by_env.ok());
    CHECK(secret_text(*by_env) == std::string(32, 'e'));
    auto by_flag = load_secret(from_flag);
    REQUIRE(by_flag.ok());
    CHECK(secret_text(*by_flag) == std::string(32, 'f'));
  }
  ScopedEnv none(kSecretFileEnv, nullptr);
  auto neither = load_secret("");
  REQUIRE_FALSE(neither.ok());
  CHECK(neither.error().code() == ErrorCode::kNotFound);
  CHECK_THAT(neither.error().message(), Catch::Contains("SHARDGUARD_SECRET_FILE"));
}

TEST_CASE("generate writes a new 0600 file of 64 hex characters and never overwrites") {
  TempDir dir;
  const mode_t old_umask = ::umask(0);  // a permissive umask must not widen the mode
  REQUIRE(generate_secret_file(dir / "a").ok());
  ::umask(old_umask);
  REQUIRE(generate_secret_file(dir / "b").ok());
  struct stat st {};
  REQUIRE(::stat((dir / "a").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  auto a = load_secret_file(dir / "a");
  auto b = load_secret_file(dir / "b");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(secret_text(*a).size() == 64);
  CHECK(secret_text(*a).find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(secret_text(*a) != secret_text(*b));

  const std::string before = shardguard::testing::slurp(dir / "a");
  auto again = generate_secret_file(dir / "a");
  REQUIRE_FALSE(again.ok());
  CHECK_THAT(again.error().message(),
             Catch::Contains("'" + (dir / "a") + "'") && Catch::Contains("exists"));
  CHECK(shardguard::testing::slurp(dir / "a") == before);
}

TEST_CASE(
    "A secret reached through a directory others can write is refused, naming the directory "
    "(sshd's StrictModes); a sticky one passes") {
  TempDir dir;
  fs::create_directory(dir / "shared");
  const std::string path = write_secret(dir, "shared/secret", kGood, 0600);
  REQUIRE(load_secret_file(path).ok());

  SECTION("group-writable, as mkdir -p under umask 002 in a setgid project directory makes it") {
    REQUIRE(::chmod((dir / "shared").c_str(), 02775) == 0);
    auto s = load_secret_file(path);
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().code() == ErrorCode::kInvalid);
    CHECK_THAT(s.error().message(),
               Catch::Contains("reached through '" + (dir / "shared") + "' (mode 2775)") &&
                   Catch::Contains("chmod go-w"));
  }
  SECTION("a link in a safe directory to a file in an unsafe one") {
    REQUIRE(::chmod((dir / "shared").c_str(), 0777) == 0);
    fs::create_directory(dir / "safe");
    fs::create_symlink(path, dir / "safe/secret");
    auto s = load_secret_file(dir / "safe/secret");
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.error().message(), Catch::Contains("reached through '" + (dir / "shared") + "'"));
  }
  SECTION("sticky and world-writable (/tmp): nobody else can replace this user's entries") {
    REQUIRE(::chmod((dir / "shared").c_str(), 01777) == 0);
    CHECK(load_secret_file(path).ok());
  }
  SECTION("a directory owned by another user (needs root to set up)") {
    if (::geteuid() != 0) return;
    REQUIRE(::chown((dir / "shared").c_str(), 65534, 65534) == 0);
    auto s = load_secret_file(path);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.error().message(), Catch::Contains("owned by uid 65534"));
  }
}
