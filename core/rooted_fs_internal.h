// The parts of RootedFilesystem shared by its implementation files (rooted_fs.cc: opening
// and reading; rooted_fs_dirs.cc: listing, creating and removing directories). Internal to
// core/. Thread-safety: as RootedFilesystem.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/rooted_fs.h"

namespace shardguard {
namespace rooted_detail {

// A tree deeper than this is not ours: removing it is refused rather than using a
// descriptor per level without bound.
constexpr int kMaxRemoveDepth = 64;

inline std::string q(const std::string& s) { return "'" + s + "'"; }

inline std::string_view kind_text(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

inline Error outside_refused(const std::string& path) {
  return Error(ErrorCode::kInvalid, q(path) + " is outside the directories this command owns");
}

inline Error is_root(const std::string& what, const std::string& path) {
  return Error(ErrorCode::kInvalid, what + " " + q(path) + ": refused on a root directory");
}

}  // namespace rooted_detail

using rooted_detail::kind_text;
using rooted_detail::q;

// A descriptor, closed on destruction unless borrowed (a root's own descriptor).
class RootedFilesystem::Fd {
 public:
  Fd() = default;
  Fd(int fd, bool owned) : fd_(fd), owned_(owned) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)), owned_(o.owned_) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
      owned_ = o.owned_;
    }
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  // Gives up ownership; the caller closes it.
  int release() { return std::exchange(fd_, -1); }

 private:
  void reset() {
    if (fd_ >= 0 && owned_) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
  bool owned_ = true;
};

struct RootedFilesystem::Root {
  RootOptions options;
  std::string given;     // as configured, without trailing slashes
  std::string absolute;  // absolute_lexical(given)
  int fd = -1;           // the root, held open once resolved; never changes after
};

struct RootedFilesystem::Resolved {
  Root* root = nullptr;
  std::string path;                // as the caller gave it, for messages
  std::vector<std::string> parts;  // components below the root

  std::string below(size_t count) const {
    std::string out = root->given;
    for (size_t i = 0; i < count; ++i) out += "/" + parts[i];
    return out;
  }
  const std::string& name() const { return parts.back(); }

  Error link_refused(size_t index) const {
    return Error(ErrorCode::kInvalid,
                 q(path) + ": " + q(below(index + 1)) + " is a symbolic link; links below " +
                     q(root->given) + " are never followed",
                 ELOOP);
  }
  // Why opening component `index` (at `dir`) failed with `err`: a link or another kind of
  // file is named as such; anything else is the OS's word.
  Error open_failed(int dir, size_t index, std::string_view what, int err, bool want_dir) const {
    struct stat st {};
    if (::fstatat(dir, parts[index].c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISLNK(st.st_mode)) return link_refused(index);
      if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
        return Error(ErrorCode::kInvalid,
                     std::string(what) + " " + q(path) + ": " + q(below(index + 1)) + " is " +
                         std::string(kind_text(st.st_mode)) +
                         (want_dir ? ", not a directory" : ", not a regular file"),
                     err);
    }
    return Error::from_errno(std::string(what) + " " + q(path), err);
  }
};

}  // namespace shardguard
