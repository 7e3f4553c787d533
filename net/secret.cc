#include "net/secret.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "net/crypto.h"

namespace shardguard::net {
namespace {

// "'path'" or "'path' (-> 'resolved')" when symlinks led elsewhere, for messages.
std::string describe(const std::string& path) {
  std::string text = "secret file '" + path + "'";
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) != nullptr && path != resolved) {
    text += std::string(" (-> '") + resolved + "')";
  }
  return text;
}

std::string octal_mode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Checks what the open descriptor refers to; checking the descriptor, not the path, leaves
// no window for the file to be swapped between the check and the read.
Status check_file(const std::string& what, const struct stat& st) {
  if (!S_ISREG(st.st_mode)) {
    return Error(ErrorCode::kInvalid, what + ": not a regular file");
  }
  // Owner read (and write) only: any group/other bit, exec or set-id bit is refused.
  if ((st.st_mode & 07177) != 0 || (st.st_mode & 0400) == 0) {
    return Error(ErrorCode::kInvalid, what + ": mode " + octal_mode(st.st_mode) +
                                          ", must be 0400 or 0600 (readable by its owner only)");
  }
  const uid_t me = ::getuid();
  if (st.st_uid != me && st.st_uid != 0) {
    return Error(ErrorCode::kInvalid, what + ": owned by uid " + std::to_string(st.st_uid) +
                                          ", must be owned by uid " + std::to_string(me) +
                                          " (this process) or root");
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxSecretBytes) {
    return Error(ErrorCode::kInvalid, what + ": " + std::to_string(st.st_size) +
                                          " bytes, more than the " +
                                          std::to_string(kMaxSecretBytes) + " a secret may have");
  }
  return ok_status();
}

// The directories from / down to the one holding `path` (absolute; `path` relative to the
// working directory otherwise).
std::vector<std::string> directories_above(const std::string& path) {
  std::string abs = path;
  if (abs.empty() || abs.front() != '/') {
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof cwd) == nullptr) return {};
    abs = std::string(cwd) + "/" + abs;
  }
  std::vector<std::string> dirs = {"/"};
  for (size_t at = abs.find('/', 1); at != std::string::npos; at = abs.find('/', at + 1))
    if (abs[at - 1] != '/') dirs.push_back(abs.substr(0, at));
  return dirs;
}

// As sshd's StrictModes checks a key's path: every directory the secret is reached through is
// owned by this user or root and writable by nobody else, or a group member could put a link
// to a file whose bytes they know in its place (a root-owned file passes the file's own
// checks). A sticky directory (/tmp) lets others add entries but not replace this user's, so
// it passes. Both the path as given (where a link may sit) and where it leads are checked.
Status check_directories(const std::string& what, const std::string& path) {
  std::vector<std::string> dirs = directories_above(path);
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) != nullptr) {
    auto more = directories_above(resolved);
    dirs.insert(dirs.end(), more.begin(), more.end());
  }
  const uid_t me = ::getuid();
  for (const auto& dir : dirs) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0)
      return Error::from_errno(what + ": stat '" + dir + "'", errno);
    if (st.st_uid != me && st.st_uid != 0)
      return Error(ErrorCode::kInvalid,
                   what + ": reached through '" + dir + "', owned by uid " +
                       std::to_string(st.st_uid) + ": every directory above a secret must be " +
                       "owned by uid " + std::to_string(me) + " (this process) or root");
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
      return Error(ErrorCode::kInvalid,
                   what + ": reached through '" + dir + "' (mode " + octal_mode(st.st_mode) +
                       "), which others can write, so they could swap the secret: make it " +
                       "writable by its owner only (chmod go-w '" + dir + "')");
  }
  return ok_status();
}

void strip_one_newline(std::string& text) {
  if (!text.empty() && text.back() == '\n') {
    text.pop_back();
    if (!text.empty() && text.back() == '\r') text.pop_back();
  }
}

}  // namespace

Result<Secret> Secret::from_bytes(std::string bytes, std::string_view origin) {
  if (bytes.size() < kMinSecretBytes) {
    const size_t n = bytes.size();
    wipe(bytes.data(), bytes.size());
    return Error(ErrorCode::kInvalid, std::string(origin) + ": " + std::to_string(n) +
                                          " bytes of secret, need at least " +
                                          std::to_string(kMinSecretBytes) +
                                          " (`shardguard secret generate FILE` makes one)");
  }
  return Secret(std::move(bytes));
}

Secret::Secret(Secret&& other) noexcept : bytes_(std::move(other.bytes_)) { other.bytes_.clear(); }

Secret& Secret::operator=(Secret&& other) noexcept {
  if (this != &other) {
    wipe(bytes_.data(), bytes_.size());
    bytes_ = std::move(other.bytes_);
    other.bytes_.clear();
  }
  return *this;
}

Secret::~Secret() { wipe(bytes_.data(), bytes_.size()); }

Result<Secret> load_secret_file(const std::string& path) {
  const std::string what = describe(path);
  // O_NONBLOCK: opening a FIFO planted at the path must not hang; it is refused below.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (fd.get() < 0) return Error::from_errno(what + ": open", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Error::from_errno(what + ": stat", errno);
  SG_RETURN_IF_ERROR(check_file(what, st));
  SG_RETURN_IF_ERROR(check_directories(what, path));

  std::string bytes(static_cast<size_t>(st.st_size) + 1, '\0');  // +1 sees growth
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      wipe(bytes.data(), bytes.size());
      return Error::from_errno(what + ": read", err);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > static_cast<size_t>(st.st_size)) {
    wipe(bytes.data(), bytes.size());
    return Error(ErrorCode::kInvalid, what + ": changed while being read");
  }
  bytes.resize(got);
  strip_one_newline(bytes);
  return Secret::from_bytes(std::move(bytes), what);
}

Result<std::string> resolve_secret_path(std::string_view flag) {
  if (!flag.empty()) return std::string(flag);
  const char* env = std::getenv(kSecretFileEnv);
  if (env != nullptr && *env != '\0') return std::string(env);
  return Error(ErrorCode::kNotFound,
               std::string("no shared secret: give a secret file (owner-only, mode 0600) with "
                           "--secret-file or ") +
                   kSecretFileEnv + "; `shardguard secret generate FILE` makes one");
}

Result<Secret> load_secret(std::string_view flag) {
  SG_ASSIGN_OR_RETURN(std::string path, resolve_secret_path(flag));
  return load_secret_file(path);
}

Status generate_secret_file(const std::string& path) {
  const std::string what = "secret file '" + path + "'";
  uint8_t raw[32];
  SG_RETURN_IF_ERROR(random_bytes(raw));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text;
  text.reserve(sizeof raw * 2 + 1);
  for (uint8_t b : raw) {
    text.push_back(kHex[b >> 4]);
    text.push_back(kHex[b & 15]);
  }
  text.push_back('\n');
  wipe(raw, sizeof raw);

  // O_EXCL | O_NOFOLLOW: never overwrite a secret, never write through a planted symlink.
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    const int err = errno;
    wipe(text.data(), text.size());
    return Error::from_errno(what + ": create", err);
  }
  // The umask can only remove bits; fchmod makes the mode exactly 0600 regardless.
  Status st =
      ::fchmod(fd.get(), 0600) == 0 ? ok_status() : Error::from_errno(what + ": chmod", errno);
  size_t done = 0;
  while (st.ok() && done < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      st = Error::from_errno(what + ": write", errno);
    else
      done += static_cast<size_t>(n);
  }
  if (st.ok() && ::fsync(fd.get()) != 0) st = Error::from_errno(what + ": fsync", errno);
  wipe(text.data(), text.size());
  if (!st.ok()) ::unlink(path.c_str());
  return st;
}

}  // namespace shardguard::net
