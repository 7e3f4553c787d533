// RootedFilesystem: paths below a root resolved from its held descriptor, one component at
// a time, with O_NOFOLLOW; see core/rooted_fs.h for the rules.
#include "core/rooted_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string_view>
#include <utility>

namespace shardguard {
namespace {

// A tree deeper than this is not ours: removing it is refused rather than using a
// descriptor per level without bound.
constexpr int kMaxRemoveDepth = 64;

std::string q(const std::string& s) { return "'" + s + "'"; }

std::string without_trailing_slashes(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// The absolute form of `path` with "." and ".." resolved as text (no link is read).
std::string absolute_lexical(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  if (ec) p = path;
  return without_trailing_slashes(p.lexically_normal().string());
}

std::string_view kind_text(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

class FileLockFd final : public FileLock {
 public:
  FileLockFd(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~FileLockFd() override { ::close(fd_); }  // closing the last descriptor unlocks
  const std::string& path() const override { return path_; }

 private:
  int fd_;
  std::string path_;
};

}  // namespace

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

RootedFilesystem::RootedFilesystem(std::vector<RootOptions> roots, Filesystem* outside)
    : outside_(outside) {
  for (auto& r : roots) {
    auto root = std::make_unique<Root>();
    root->given = without_trailing_slashes(r.path);
    root->absolute = absolute_lexical(r.path);
    root->options = std::move(r);
    roots_.push_back(std::move(root));
  }
}

RootedFilesystem::~RootedFilesystem() {
  for (auto& r : roots_)
    if (r->fd >= 0) ::close(r->fd);
}

std::unique_ptr<RootedFilesystem> RootedFilesystem::single(RootOptions root) {
  std::vector<RootOptions> roots;
  roots.push_back(std::move(root));
  return std::make_unique<RootedFilesystem>(std::move(roots));
}

Result<std::optional<RootedFilesystem::Resolved>> RootedFilesystem::resolve(
    const std::string& path) const {
  // Paths are usually built from the root as configured; the absolute form matches the rest.
  // Roots may nest (a run directory inside the checkpoint directory): the deepest one wins.
  const std::string absolute = absolute_lexical(path);
  const Root* best = nullptr;
  std::string_view best_rest;
  for (const auto& root : roots_) {
    std::string_view rest;
    // Sets `rest` to what follows `prefix` in `p` when `p` is at or below it.
    auto below = [&rest](std::string_view p, const std::string& prefix) {
      if (p == prefix) {
        rest = {};
        return true;
      }
      if (p.size() <= prefix.size() || !p.starts_with(prefix)) return false;
      if (prefix != "/" && p[prefix.size()] != '/') return false;
      rest = p.substr(prefix.size());
      return true;
    };
    if (!below(path, root->given) && !below(absolute, root->absolute)) continue;
    if (best == nullptr || root->absolute.size() > best->absolute.size()) {
      best = root.get();
      best_rest = rest;
    }
  }
  if (best == nullptr) return std::optional<Resolved>();
  Resolved r;
  r.root = const_cast<Root*>(best);
  r.path = path;
  for (std::string_view rest = best_rest; !rest.empty();) {
    const size_t slash = rest.find('/');
    const std::string_view part = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    if (part.empty() || part == ".") continue;
    if (part == "..")
      return Error(ErrorCode::kInvalid, q(path) + ": '..' below " + q(best->given) + " is refused");
    r.parts.emplace_back(part);
  }
  return std::optional<Resolved>(std::move(r));
}

Result<int> RootedFilesystem::root_fd(Root& root) const {
  std::lock_guard lock(mu_);
  if (root.fd >= 0) return root.fd;
  // The root itself may be reached through links: it is the user's own configured path.
  const int fd = ::open(root.given.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Error::from_errno("open directory " + q(root.given), errno);
  if (root.options.group) {
    // A configured group applies to the root too, when it is ours to change.
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_gid != *root.options.group && st.st_uid == ::geteuid()) {
      if (::fchown(fd, static_cast<uid_t>(-1), *root.options.group) != 0 ||
          ::fchmod(fd, (st.st_mode & 07777) | S_ISGID | S_IRGRP | S_IXGRP) != 0) {
        const int err = errno;
        ::close(fd);
        return Error::from_errno(
            "give " + q(root.given) + " to group " + std::to_string(*root.options.group), err);
      }
    }
  }
  root.fd = fd;
  return fd;
}

Result<RootedFilesystem::Fd> RootedFilesystem::open_dir(const Resolved& r, size_t count) const {
  SG_ASSIGN_OR_RETURN(int root, root_fd(*r.root));
  Fd cur(root, /*owned=*/false);
  for (size_t i = 0; i < count; ++i) {
    const int next =
        ::openat(cur.get(), r.parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return r.open_failed(cur.get(), i, "open directory", errno, /*want_dir=*/true);
    cur = Fd(next, /*owned=*/true);
  }
  return cur;
}

Status RootedFilesystem::set_owner_and_mode(const Resolved& r, int fd, bool dir) const {
  const RootOptions& o = r.root->options;
  mode_t mode = dir ? o.dir_mode : o.file_mode;
  if (o.group) {
    // Before chmod: an unprivileged chown clears the set-group-ID bit.
    if (::fchown(fd, static_cast<uid_t>(-1), *o.group) != 0)
      return Error::from_errno("set the group of " + q(r.path) + " to " + std::to_string(*o.group),
                               errno);
    if (dir) mode |= S_ISGID;  // what the ranks create inside inherits the group
  }
  if (::fchmod(fd, mode) != 0) return Error::from_errno("chmod " + q(r.path), errno);
  return {};
}

namespace {

Error outside_refused(const std::string& path) {
  return Error(ErrorCode::kInvalid, q(path) + " is outside the directories this command owns");
}

Error is_root(const std::string& what, const std::string& path) {
  return Error(ErrorCode::kInvalid, what + " " + q(path) + ": refused on a root directory");
}

}  // namespace

Result<std::unique_ptr<WritableFile>> RootedFilesystem::open_for_write(const std::string& path,
                                                                       OpenOptions options) {
  SG_ASSIGN_OR_RETURN(auto res, resolve(path));
  if (!res) return outside_ ? outside_->open_for_write(path, options) : outside_refused(path);
  if (res->parts.empty()) return is_root("open", path);
  SG_ASSIGN_OR_RETURN(Fd dir, open_dir(*res, res->parts.size() - 1));
  const mode_t mode = res->root->options.file_mode;
  auto open_at = [&](int flags) {
    // O_NONBLOCK: a FIFO planted here fails or opens at once instead of blocking. O_DIRECT
    // comes later: a filesystem that refuses it does so only after O_CREAT made the file.
    flags |= O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
    return ::openat(dir.get(), res->name().c_str(), flags, mode);
  };
  int fd = open_at(O_CREAT | O_EXCL);
  const bool created = fd >= 0;
  if (fd < 0 && errno == EEXIST && !options.exclusive) fd = open_at(0);
  if (fd < 0) {
    const size_t last = res->parts.size() - 1;
    return res->open_failed(dir.get(), last, "open", errno, /*want_dir=*/false);
  }
  Fd file(fd, true);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Error::from_errno("stat " + q(path), errno);
  if (!S_ISREG(st.st_mode))
    return Error(
        ErrorCode::kInvalid,
        "open " + q(path) + ": is " + std::string(kind_text(st.st_mode)) + ", not a regular file");
  if (!created) {
    // Rewriting in place: never through a hard link planted to another file.
    if (st.st_nlink > 1)
      return Error(ErrorCode::kInvalid, "open " + q(path) + ": has " + std::to_string(st.st_nlink) +
                                            " hard links; not rewritten");
    if (::ftruncate(fd, 0) != 0) return Error::from_errno("truncate " + q(path), errno);
  }
  const int flags = ::fcntl(fd, F_GETFL) & ~O_NONBLOCK;
  // O_DIRECT where the filesystem takes it; where it does not (EINVAL), buffered writes.
  if (!options.direct || ::fcntl(fd, F_SETFL, flags | O_DIRECT) != 0) {
    if (::fcntl(fd, F_SETFL, flags) != 0) return Error::from_errno("fcntl " + q(path), errno);
  }
  if (created) SG_RETURN_IF_ERROR(set_owner_and_mode(*res, fd, /*dir=*/false));
  return posix::adopt_writable(file.release(), path);
}

Result<RootedFilesystem::Fd> RootedFilesystem::open_regular_for_read(const std::string& path,
                                                                     bool direct,
                                                                     bool* took_direct) const {
  SG_ASSIGN_OR_RETURN(auto res, resolve(path));
  if (!res) return Error(ErrorCode::kInternal, "open_regular_for_read outside a root");
  if (res->parts.empty()) return is_root("open", path);
  SG_ASSIGN_OR_RETURN(Fd dir, open_dir(*res, res->parts.size() - 1));
  // O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
  const int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  int fd = ::openat(dir.get(), res->name().c_str(), flags | (direct ? O_DIRECT : 0));
  if (fd < 0 && direct && errno == EINVAL) {
    direct = false;
    fd = ::openat(dir.get(), res->name().c_str(), flags);
  }
  if (fd < 0)
    return res->open_failed(dir.get(), res->parts.size() - 1, "open", errno, /*want_dir=*/false);
  Fd file(fd, true);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Error::from_errno("stat " + q(path), errno);
  if (!S_ISREG(st.st_mode))
    return Error(
        ErrorCode::kInvalid,
        "open " + q(path) + ": is " + std::string(kind_text(st.st_mode)) + ", not a regular file");
  if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
    return Error::from_errno("fcntl " + q(path), errno);
  if (took_direct != nullptr) *took_direct = direct;
  return file;
}

Result<std::unique_ptr<MappedFile>> RootedFilesystem::map_readonly(const std::string& path) {
  SG_ASSIGN_OR_RETURN(auto res, resolve(path));
  if (!res) return outside_ ? outside_->map_readonly(path) : outside_refused(path);
  SG_ASSIGN_OR_RETURN(Fd fd, open_regular_for_read(path, false, nullptr));
  return posix::map_fd(fd.release(), path);
}

Result<std::unique_ptr<RandomAccessFile>> RootedFilesystem::open_for_read(const std::string& path,
                                                                          ReadOptions options) {
  SG_ASSIGN_OR_RETURN(auto res, resolve(path));
  if (!res) return outside_ ? outside_->open_for_read(path, options) : outside_refused(path);
  bool direct = false;
  SG_ASSIGN_OR_RETURN(Fd fd, open_regular_for_read(path, options.direct, &direct));
  return posix::adopt_readable(fd.release(), direct, path);
}

Result<std::string> RootedFilesystem::read_file(const std::string& path) {
  SG_ASSIGN_OR_RETURN(auto res, resolve(path));
  if (!res) return outside_ ? outside_->read_file(path) : outside_refused(path);
  SG_ASSIGN_OR_RETURN(Fd fd, open_regular_for_read(path, false, nullptr));
  return posix::read_fd(fd.release(), path);
}

Status RootedFilesystem::rename(const std::string& from, const std::string& to) {
  SG_ASSIGN_OR_RETURN(auto a, resolve(from));
  SG_ASSIGN_OR_RETURN(auto b, resolve(to));
  if (!a && !b) return outside_ ? outside_->rename(from, to) : outside_refused(from);
  const std::string what = "rename " + q(from) + " -> " + q(to);
  if (!a || !b || a->root != b->root)
    return Error(ErrorCode::kInvalid, what + ": not within one root directory");
  if (a->parts.empty() || b->parts.empty()) return is_root("rename", a->parts.empty() ? from : to);
  SG_ASSIGN_OR_RETURN(Fd da, open_dir(*a, a->parts.size() - 1));
  SG_ASSIGN_OR_RETURN(Fd db, open_dir(*b, b->parts.size() - 1));
  // renameat() works on the entries themselves: a link is moved, never followed.
  if (::renameat(da.get(), a->name().c_str(), db.get(), b->name().c_str()) != 0)
    return Error::from_errno(what, errno);
  return {};
}

Status RootedFilesystem::sync_dir(const std::string& dir) {
  SG_ASSIGN_OR_RETURN(auto res, resolve(dir));
  if (!res) return outside_ ? outside_->sync_dir(dir) : outside_refused(dir);
  SG_ASSIGN_OR_RETURN(Fd fd, open_dir(*res, res->parts.size()));
  if (::fsync(fd.get()) != 0) return Error::from_errno("fsync directory " + q(dir), errno);
  return {};
}

Result<std::vector<DirEntry>> RootedFilesystem::list(const std::string& dir) {
  SG_ASSIGN_OR_RETURN(auto res, resolve(dir));
  if (!res) return outside_ ? outside_->list(dir) : outside_refused(dir);
  SG_ASSIGN_OR_RETURN(Fd fd, open_dir(*res, res->parts.size()));
  // A new open file description, not a dup: a dup shares the read position, so a second
  // listing of a held root would start where the first ended (and see nothing).
  const int copy = ::openat(fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (copy < 0) return Error::from_errno("list " + q(dir), errno);
  DIR* d = ::fdopendir(copy);
  if (d == nullptr) {
    const int err = errno;
    ::close(copy);
    return Error::from_errno("list " + q(dir), err);
  }
  std::vector<DirEntry> out;
  errno = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    unsigned char type = e->d_type;
    if (type == DT_UNKNOWN) {  // some filesystems do not fill d_type
      struct stat st {};
      if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
        type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISLNK(st.st_mode) ? DT_LNK : DT_REG;
    }
    out.push_back({std::string(name), type == DT_DIR, type == DT_LNK});
    errno = 0;
  }
  const int err = errno;
  ::closedir(d);
  if (err != 0) return Error::from_errno("list " + q(dir), err);
  return out;
}

Status RootedFilesystem::remove(const std::string& path) {
  SG_ASSIGN_OR_RETURN(auto res, resolve(path));
  if (!res) return outside_ ? outside_->remove(path) : outside_refused(path);
  if (res->parts.empty()) return is_root("remove", path);
  SG_ASSIGN_OR_RETURN(Fd dir, open_dir(*res, res->parts.size() - 1));
  if (::unlinkat(dir.get(), res->name().c_str(), 0) == 0) return {};
  if (errno == EISDIR && ::unlinkat(dir.get(), res->name().c_str(), AT_REMOVEDIR) == 0) return {};
  return Error::from_errno("remove " + q(path), errno);
}

namespace {

// Removes everything inside the directory open at `dir` (owned by the caller), descending
// only into real directories, each opened with O_NOFOLLOW from its parent.
Status remove_contents(int dir, const std::string& label, int depth) {
  if (depth > kMaxRemoveDepth)
    return Error(ErrorCode::kInvalid, "remove " + q(label) + ": nested deeper than " +
                                          std::to_string(kMaxRemoveDepth) + " directories");
  const int copy = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // own position
  if (copy < 0) return Error::from_errno("remove " + q(label), errno);
  DIR* d = ::fdopendir(copy);
  if (d == nullptr) {
    const int err = errno;
    ::close(copy);
    return Error::from_errno("remove " + q(label), err);
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  ::closedir(d);
  for (const auto& name : names) {
    const std::string child = label + "/" + name;
    if (::unlinkat(dir, name.c_str(), 0) == 0 || errno == ENOENT) continue;
    if (errno != EISDIR) return Error::from_errno("remove " + q(child), errno);
    const int sub = ::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) {
      if (errno == ENOENT) continue;
      // Replaced by a link or a file since: unlink that instead, never follow it.
      if ((errno == ELOOP || errno == ENOTDIR) && ::unlinkat(dir, name.c_str(), 0) == 0) continue;
      return Error::from_errno("remove " + q(child), errno);
    }
    Status st = remove_contents(sub, child, depth + 1);
    ::close(sub);
    SG_RETURN_IF_ERROR(st);
    if (::unlinkat(dir, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
      return Error::from_errno("remove " + q(child), errno);
  }
  return {};
}

}  // namespace

Status RootedFilesystem::remove_all(const std::string& path) {
  SG_ASSIGN_OR_RETURN(auto res, resolve(path));
  if (!res) return outside_ ? outside_->remove_all(path) : outside_refused(path);
  if (res->parts.empty()) return is_root("remove", path);
  auto parent = open_dir(*res, res->parts.size() - 1);
  if (!parent.ok()) {
    if (parent.error().sys_errno() == ENOENT) return {};  // already gone
    return std::move(parent).error();
  }
  const int dir = parent->get();
  const char* name = res->name().c_str();
  if (::unlinkat(dir, name, 0) == 0 || errno == ENOENT) return {};
  if (errno != EISDIR) return Error::from_errno("remove " + q(path), errno);
  const int sub = ::openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sub < 0) {
    if (errno == ENOENT) return {};
    if ((errno == ELOOP || errno == ENOTDIR) && ::unlinkat(dir, name, 0) == 0) return {};
    return Error::from_errno("remove " + q(path), errno);
  }
  Status st = remove_contents(sub, path, 1);
  ::close(sub);
  SG_RETURN_IF_ERROR(st);
  if (::unlinkat(dir, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
    return Error::from_errno("remove " + q(path), errno);
  return {};
}

Status RootedFilesystem::create_dirs(const std::string& path) {
  SG_ASSIGN_OR_RETURN(auto res, resolve(path));
  if (!res) return outside_ ? outside_->create_dirs(path) : outside_refused(path);
  Root& root = *res->root;
  if (auto fd = root_fd(root); !fd.ok()) {
    if (fd.error().code() != ErrorCode::kNotFound) return std::move(fd).error();
    // mkdir -p of the root itself: above and at the root, the path is the user's own.
    const std::string& given = root.given;
    if (given.empty()) return Error(ErrorCode::kInvalid, "create directory '': empty root");
    for (size_t at = given.front() == '/' ? 1 : 0;;) {
      const size_t slash = given.find('/', at);
      const std::string prefix = given.substr(0, slash);
      if (!prefix.empty() && ::mkdir(prefix.c_str(), root.options.dir_mode) == 0) {
        const int made = ::open(prefix.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (made < 0) return Error::from_errno("open directory " + q(prefix), errno);
        Fd guard(made, true);
        Resolved r{&root, prefix, {}};
        SG_RETURN_IF_ERROR(set_owner_and_mode(r, made, /*dir=*/true));
      } else if (!prefix.empty() && errno != EEXIST) {
        return Error::from_errno("create directory " + q(prefix), errno);
      }
      if (slash == std::string::npos) break;
      at = slash + 1;
    }
    SG_RETURN_IF_ERROR(root_fd(root));
  }
  SG_ASSIGN_OR_RETURN(int root_dir, root_fd(root));
  Fd cur(root_dir, /*owned=*/false);
  for (size_t i = 0; i < res->parts.size(); ++i) {
    const char* name = res->parts[i].c_str();
    const bool made = ::mkdirat(cur.get(), name, root.options.dir_mode) == 0;
    if (!made && errno != EEXIST)
      return Error::from_errno("create directory " + q(res->below(i + 1)), errno);
    const int next = ::openat(cur.get(), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0)
      return res->open_failed(cur.get(), i, "create directory", errno, /*want_dir=*/true);
    cur = Fd(next, true);
    if (made) {
      Resolved r{&root, res->below(i + 1), {}};
      SG_RETURN_IF_ERROR(set_owner_and_mode(r, next, /*dir=*/true));
    }
  }
  return {};
}

Result<uint64_t> RootedFilesystem::file_size(const std::string& path) {
  SG_ASSIGN_OR_RETURN(auto res, resolve(path));
  if (!res) return outside_ ? outside_->file_size(path) : outside_refused(path);
  if (res->parts.empty()) return is_root("stat", path);
  SG_ASSIGN_OR_RETURN(Fd dir, open_dir(*res, res->parts.size() - 1));
  struct stat st {};
  if (::fstatat(dir.get(), res->name().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return Error::from_errno("stat " + q(path), errno);
  if (S_ISLNK(st.st_mode)) return res->link_refused(res->parts.size() - 1);
  if (!S_ISREG(st.st_mode))
    return Error(
        ErrorCode::kInvalid,
        "stat " + q(path) + ": is " + std::string(kind_text(st.st_mode)) + ", not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

Result<bool> RootedFilesystem::exists(const std::string& path) {
  SG_ASSIGN_OR_RETURN(PathKind kind, path_kind(path));
  return kind != PathKind::kMissing;
}

Result<uint64_t> RootedFilesystem::free_space(const std::string& path) {
  SG_ASSIGN_OR_RETURN(auto res, resolve(path));
  if (!res) return outside_ ? outside_->free_space(path) : outside_refused(path);
  SG_ASSIGN_OR_RETURN(Fd dir, open_dir(*res, res->parts.empty() ? 0 : res->parts.size() - 1));
  struct statvfs st {};
  if (::fstatvfs(dir.get(), &st) != 0) return Error::from_errno("statvfs " + q(path), errno);
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

Result<PathKind> RootedFilesystem::path_kind(const std::string& path) {
  SG_ASSIGN_OR_RETURN(auto res, resolve(path));
  if (!res) return outside_ ? outside_->path_kind(path) : outside_refused(path);
  const size_t depth = res->parts.empty() ? 0 : res->parts.size() - 1;
  auto dir = open_dir(*res, depth);
  if (!dir.ok()) {
    // Missing on the way, or a file where a directory would be: nothing is there (as lstat).
    const int err = dir.error().sys_errno();
    if (err == ENOENT || err == ENOTDIR) return PathKind::kMissing;
    return std::move(dir).error();
  }
  if (res->parts.empty()) return PathKind::kDirectory;
  struct stat st {};
  if (::fstatat(dir->get(), res->name().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return PathKind::kMissing;
    return Error::from_errno("lstat " + q(path), errno);
  }
  if (S_ISLNK(st.st_mode)) return PathKind::kSymlink;
  if (S_ISDIR(st.st_mode)) return PathKind::kDirectory;
  if (S_ISREG(st.st_mode)) return PathKind::kFile;
  return PathKind::kOther;
}

Result<LockAttempt> RootedFilesystem::try_lock_file(const std::string& path) {
  SG_ASSIGN_OR_RETURN(auto res, resolve(path));
  if (!res) return outside_ ? outside_->try_lock_file(path) : outside_refused(path);
  if (res->parts.empty()) return is_root("lock", path);
  SG_ASSIGN_OR_RETURN(Fd dir, open_dir(*res, res->parts.size() - 1));
  const int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  const char* name = res->name().c_str();
  int fd = ::openat(dir.get(), name, flags | O_CREAT | O_EXCL, res->root->options.file_mode);
  const bool created = fd >= 0;
  if (fd < 0 && errno == EEXIST) fd = ::openat(dir.get(), name, flags);
  if (fd < 0) return res->open_failed(dir.get(), res->parts.size() - 1, "open", errno, false);
  Fd file(fd, true);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Error::from_errno("stat " + q(path), errno);
  if (!S_ISREG(st.st_mode))
    return Error(
        ErrorCode::kInvalid,
        "open " + q(path) + ": is " + std::string(kind_text(st.st_mode)) + ", not a regular file");
  if (created) SG_RETURN_IF_ERROR(set_owner_and_mode(*res, fd, /*dir=*/false));
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0)
    return LockAttempt{LockStatus::kAcquired, std::make_unique<FileLockFd>(file.release(), path),
                       0};
  const int err = errno;
  if (err == EWOULDBLOCK) return LockAttempt{LockStatus::kHeld, nullptr, err};
  if (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS)
    return LockAttempt{LockStatus::kUnsupported, nullptr, err};
  return Error::from_errno("flock " + q(path), err);
}

}  // namespace shardguard
