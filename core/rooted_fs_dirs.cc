// RootedFilesystem's directory operations: listing through the held root's own open file
// description, creating with exact modes, removing without ever leaving the root through a
// link. See core/rooted_fs.h for the rules.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "core/rooted_fs.h"
#include "core/rooted_fs_internal.h"

namespace shardguard {

using namespace rooted_detail;

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

}  // namespace shardguard
