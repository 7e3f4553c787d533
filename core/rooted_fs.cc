// RootedFilesystem: paths below a root resolved from its held descriptor, one component at
// a time, with O_NOFOLLOW; see core/rooted_fs.h for the rules.
#include "core/rooted_fs.h"
#include "core/rooted_fs_internal.h"

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

using namespace rooted_detail;

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

}  // namespace

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

Status RootedFilesystem::rename_noreplace(const std::string& from, const std::string& to) {
  SG_ASSIGN_OR_RETURN(auto a, resolve(from));
  SG_ASSIGN_OR_RETURN(auto b, resolve(to));
  if (!a && !b) return outside_ ? outside_->rename_noreplace(from, to) : outside_refused(from);
  const std::string what = "rename " + q(from) + " -> " + q(to);
  if (!a || !b || a->root != b->root)
    return Error(ErrorCode::kInvalid, what + ": not within one root directory");
  if (a->parts.empty() || b->parts.empty()) return is_root("rename", a->parts.empty() ? from : to);
  SG_ASSIGN_OR_RETURN(Fd da, open_dir(*a, a->parts.size() - 1));
  SG_ASSIGN_OR_RETURN(Fd db, open_dir(*b, b->parts.size() - 1));
  return posix::rename_noreplace_at(da.get(), a->name().c_str(), db.get(), b->name().c_str(),
                                    what);
}

Status RootedFilesystem::sync_dir(const std::string& dir) {
  SG_ASSIGN_OR_RETURN(auto res, resolve(dir));
  if (!res) return outside_ ? outside_->sync_dir(dir) : outside_refused(dir);
  SG_ASSIGN_OR_RETURN(Fd fd, open_dir(*res, res->parts.size()));
  if (::fsync(fd.get()) != 0) return Error::from_errno("fsync directory " + q(dir), errno);
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
    return LockAttempt{LockStatus::kAcquired, lock_held_by_fd(file.release(), path),
                       0};
  const int err = errno;
  if (err == EWOULDBLOCK) return LockAttempt{LockStatus::kHeld, nullptr, err};
  if (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS)
    return LockAttempt{LockStatus::kUnsupported, nullptr, err};
  return Error::from_errno("flock " + q(path), err);
}

}  // namespace shardguard
