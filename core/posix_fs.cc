// PosixFilesystem: the production Filesystem, straight system calls with errors that name
// the path.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>  // renameat2, RENAME_NOREPLACE
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/filesystem.h"

namespace shardguard {
namespace {

std::string q(const std::string& s) { return "'" + s + "'"; }

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status append(std::span<const std::byte> data) override {
    SG_RETURN_IF_ERROR(write_at(offset_, data));
    offset_ += data.size();
    return {};
  }

  Status write_at(uint64_t offset, std::span<const std::byte> data) override {
    SG_RETURN_IF_ERROR(drop_direct_if_unaligned(offset, data));
    const std::byte* p = data.data();
    size_t left = data.size();
    while (left > 0) {
      ssize_t n = ::pwrite(fd_, p, left, static_cast<off_t>(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Error::from_errno("write " + q(path_), errno);
      }
      p += n;
      left -= static_cast<size_t>(n);
      offset += static_cast<uint64_t>(n);
    }
    return {};
  }

  Status preallocate(uint64_t size) override {
    if (size == 0) return {};
    int rc = ::posix_fallocate(fd_, 0, static_cast<off_t>(size));
    // Filesystems without fallocate (some tmpfs, NFS) just skip the reservation.
    if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL)
      return Error::from_errno("preallocate " + q(path_), rc);
    return {};
  }

  Status truncate(uint64_t size) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0)
      return Error::from_errno("truncate " + q(path_), errno);
    return {};
  }

  Status sync() override {
    if (::fdatasync(fd_) != 0) return Error::from_errno("fsync " + q(path_), errno);
    return {};
  }

  Status close() override {
    if (fd_ < 0) return {};
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return Error::from_errno("close " + q(path_), errno);
    return {};
  }

  const std::string& path() const override { return path_; }

 private:
  // O_DIRECT takes only aligned offsets, sizes and buffers. The unaligned tail of a file goes
  // through the page cache: clearing O_DIRECT (fcntl) instead of padding the write and
  // truncating the file back, which some filesystems (s3fs before the first fsync) ignore.
  Status drop_direct_if_unaligned(uint64_t offset, std::span<const std::byte> data) {
    constexpr uint64_t kAlign = 4096;
    if (offset % kAlign == 0 && data.size() % kAlign == 0 &&
        reinterpret_cast<uintptr_t>(data.data()) % kAlign == 0)
      return {};
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0) return Error::from_errno("fcntl " + q(path_), errno);
    if ((flags & O_DIRECT) == 0) return {};
    if (::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) != 0)
      return Error::from_errno("fcntl " + q(path_), errno);
    return {};
  }

  int fd_;
  std::string path_;
  uint64_t offset_ = 0;
};

class PosixMappedFile final : public MappedFile {
 public:
  PosixMappedFile(void* addr, size_t size, std::string path)
      : addr_(addr), size_(size), path_(std::move(path)) {}
  ~PosixMappedFile() override {
    if (addr_ != nullptr) ::munmap(addr_, size_);
  }
  std::span<const std::byte> bytes() const override {
    return {static_cast<const std::byte*>(addr_), size_};
  }
  const std::string& path() const override { return path_; }

  std::optional<uint64_t> resident_bytes(uint64_t offset, uint64_t length) const override {
    if (offset >= size_) return 0;
    length = std::min<uint64_t>(length, size_ - offset);
    if (length == 0) return 0;
    static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t first = offset / page, last = (offset + length - 1) / page;
    // A byte per page; in steps so the vector stays small for a large range.
    constexpr uint64_t kStep = 4096;
    unsigned char vec[kStep];
    uint64_t resident = 0;
    for (uint64_t p = first; p <= last; p += kStep) {
      const uint64_t n = std::min(kStep, last + 1 - p);
      if (::mincore(static_cast<std::byte*>(addr_) + p * page, n * page, vec) != 0)
        return std::nullopt;
      for (uint64_t i = 0; i < n; ++i) {
        if ((vec[i] & 1) == 0) continue;
        // Count only the part of the page inside the range.
        const uint64_t b = std::max(offset, (p + i) * page);
        const uint64_t e = std::min(offset + length, (p + i + 1) * page);
        resident += e - b;
      }
    }
    return resident;
  }

 private:
  void* addr_;
  size_t size_;
  std::string path_;
};

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(int fd, uint64_t size, bool direct, std::string path)
      : fd_(fd), size_(size), direct_(direct), path_(std::move(path)) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  Result<size_t> read_at(uint64_t offset, std::span<std::byte> out) const override {
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::pread(fd_, out.data() + done, out.size() - done,
                          static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Error::from_errno("read " + q(path_) + " at offset " + std::to_string(offset + done),
                                 errno);
      }
      if (n == 0) break;  // end of file
      done += static_cast<size_t>(n);
      // An O_DIRECT read that stops short of an aligned end has reached the end of the file.
      if (direct_ && done % kDirectReadAlignment != 0) break;
    }
    return done;
  }
  uint64_t size() const override { return size_; }
  bool direct() const override { return direct_; }
  const std::string& path() const override { return path_; }

 private:
  int fd_;
  uint64_t size_;
  bool direct_;
  std::string path_;
};

// Serves positional reads from a mapping: Filesystem's default open_for_read().
class MappedRandomAccessFile final : public RandomAccessFile {
 public:
  explicit MappedRandomAccessFile(std::unique_ptr<MappedFile> file) : file_(std::move(file)) {}
  Result<size_t> read_at(uint64_t offset, std::span<std::byte> out) const override {
    const auto bytes = file_->bytes();
    if (offset >= bytes.size()) return size_t{0};
    const size_t n = std::min<uint64_t>(out.size(), bytes.size() - offset);
    std::memcpy(out.data(), bytes.data() + offset, n);
    return n;
  }
  uint64_t size() const override { return file_->bytes().size(); }
  bool direct() const override { return false; }
  const std::string& path() const override { return file_->path(); }

 private:
  std::unique_ptr<MappedFile> file_;
};

class FdFileLock final : public FileLock {
 public:
  FdFileLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~FdFileLock() override { ::close(fd_); }  // closing the last descriptor unlocks
  const std::string& path() const override { return path_; }

 private:
  int fd_;
  std::string path_;
};

}  // namespace

std::unique_ptr<FileLock> lock_held_by_fd(int fd, std::string path) {
  return std::make_unique<FdFileLock>(fd, std::move(path));
}

Status RandomAccessFile::read_exact(uint64_t offset, std::span<std::byte> out) const {
  SG_ASSIGN_OR_RETURN(size_t n, read_at(offset, out));
  if (n != out.size())
    return Error(ErrorCode::kIo, "read " + q(path()) + ": " + std::to_string(out.size()) +
                                     " bytes at offset " + std::to_string(offset) +
                                     " run past the end of the file (" + std::to_string(n) +
                                     " read)");
  return {};
}

Result<std::unique_ptr<DirectIoBuffer>> DirectIoBuffer::allocate(size_t size) {
  const size_t mapped = size + kHugePage;  // room to align the start
  void* mapping =
      ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED)
    return Error::from_errno("allocate an I/O buffer of " + std::to_string(size) + " bytes",
                             errno);
  const auto at =
      (reinterpret_cast<uintptr_t>(mapping) + kHugePage - 1) / kHugePage * kHugePage;
  auto* data = reinterpret_cast<std::byte*>(at);
  (void)::madvise(data, size, MADV_HUGEPAGE);  // a hint; fine where THP is off
  std::memset(data, 0, size);                  // fault it in now, not inside every I/O
  return std::unique_ptr<DirectIoBuffer>(new DirectIoBuffer(mapping, mapped, data, size));
}

DirectIoBuffer::~DirectIoBuffer() { ::munmap(mapping_, mapped_); }

Status Filesystem::rename_noreplace(const std::string& from, const std::string& to) {
  return Error(ErrorCode::kUnsupported,
               "rename " + q(from) + " -> " + q(to) + " without replacing: not supported here");
}

namespace posix {
Status rename_noreplace_at(int from_dir, const char* from, int to_dir, const char* to,
                           const std::string& what) {
  if (::renameat2(from_dir, from, to_dir, to, RENAME_NOREPLACE) == 0) return {};
  if (errno != EINVAL && errno != ENOSYS) return Error::from_errno(what, errno);
  // No RENAME_NOREPLACE on this filesystem (NFS, some FUSE): link(2) never replaces either.
  if (::linkat(from_dir, from, to_dir, to, 0) != 0) return Error::from_errno(what, errno);
  if (::unlinkat(from_dir, from, 0) != 0) return Error::from_errno(what, errno);
  return {};
}
}  // namespace posix

Result<PathKind> Filesystem::path_kind(const std::string& path) {
  return Error(ErrorCode::kUnsupported, "lstat " + q(path) + ": not supported by this filesystem");
}

Result<LockAttempt> Filesystem::try_lock_file(const std::string&) {
  return LockAttempt{LockStatus::kUnsupported, nullptr, EOPNOTSUPP};
}

Result<std::unique_ptr<RandomAccessFile>> Filesystem::open_for_read(const std::string& path,
                                                                    ReadOptions) {
  SG_ASSIGN_OR_RETURN(auto mapped, map_readonly(path));
  return std::unique_ptr<RandomAccessFile>(
      std::make_unique<MappedRandomAccessFile>(std::move(mapped)));
}

PosixFilesystem& PosixFilesystem::instance() {
  static PosixFilesystem fs;
  return fs;
}

namespace posix {

std::unique_ptr<WritableFile> adopt_writable(int fd, std::string path) {
  return std::make_unique<PosixWritableFile>(fd, std::move(path));
}

Result<std::unique_ptr<MappedFile>> map_fd(int fd, std::string path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Error::from_errno("stat " + q(path), err);
  }
  void* addr = nullptr;
  const auto size = static_cast<size_t>(st.st_size);
  if (size > 0) {
    addr = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return Error::from_errno("mmap " + q(path), err);
    }
  }
  ::close(fd);
  return std::unique_ptr<MappedFile>(std::make_unique<PosixMappedFile>(addr, size, path));
}

Result<std::unique_ptr<RandomAccessFile>> adopt_readable(int fd, bool direct, std::string path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Error::from_errno("stat " + q(path), err);
  }
  return std::unique_ptr<RandomAccessFile>(std::make_unique<PosixRandomAccessFile>(
      fd, static_cast<uint64_t>(st.st_size), direct, std::move(path)));
}

Result<std::string> read_fd(int fd, const std::string& path) {
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return Error::from_errno("read " + q(path), err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace posix

Result<std::unique_ptr<WritableFile>> PosixFilesystem::open_for_write(const std::string& path,
                                                                      OpenOptions options) {
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC;
  flags |= options.exclusive ? O_EXCL : O_TRUNC;
  if (options.direct) flags |= O_DIRECT;
  int fd = ::open(path.c_str(), flags, kDefaultFileMode);
  if (fd < 0 && options.direct && errno == EINVAL) {
    // The filesystem refuses O_DIRECT (tmpfs): fall back to buffered writes.
    fd = ::open(path.c_str(), flags & ~O_DIRECT, kDefaultFileMode);
  }
  if (fd < 0) return Error::from_errno("open " + q(path), errno);
  return posix::adopt_writable(fd, path);
}

Result<std::unique_ptr<MappedFile>> PosixFilesystem::map_readonly(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error::from_errno("open " + q(path), errno);
  return posix::map_fd(fd, path);
}

Result<std::unique_ptr<RandomAccessFile>> PosixFilesystem::open_for_read(const std::string& path,
                                                                         ReadOptions options) {
  int flags = O_RDONLY | O_CLOEXEC;
  bool direct = options.direct;
  int fd = ::open(path.c_str(), flags | (direct ? O_DIRECT : 0));
  if (fd < 0 && direct && errno == EINVAL) {
    // The filesystem refuses O_DIRECT (tmpfs): fall back to buffered reads.
    direct = false;
    fd = ::open(path.c_str(), flags);
  }
  if (fd < 0) return Error::from_errno("open " + q(path), errno);
  return posix::adopt_readable(fd, direct, path);
}

Result<std::string> PosixFilesystem::read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error::from_errno("open " + q(path), errno);
  return posix::read_fd(fd, path);
}

Status PosixFilesystem::rename_noreplace(const std::string& from, const std::string& to) {
  return posix::rename_noreplace_at(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(),
                                    "rename " + q(from) + " -> " + q(to));
}

Status PosixFilesystem::rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    return Error::from_errno("rename " + q(from) + " -> " + q(to), errno);
  return {};
}

Status PosixFilesystem::sync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Error::from_errno("open directory " + q(dir), errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Error::from_errno("fsync directory " + q(dir), err);
  return {};
}

Result<std::vector<DirEntry>> PosixFilesystem::list(const std::string& dir) {
  std::error_code ec;
  std::vector<DirEntry> out;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return Error::from_errno("list " + q(dir), ec.value());
  for (const auto& entry : it) {
    std::error_code type_ec, link_ec;
    out.push_back({entry.path().filename().string(), entry.is_directory(type_ec),
                   entry.is_symlink(link_ec)});
  }
  return out;
}

Status PosixFilesystem::remove(const std::string& path) {
  if (::remove(path.c_str()) != 0) return Error::from_errno("remove " + q(path), errno);
  return {};
}

Status PosixFilesystem::remove_all(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return Error::from_errno("remove " + q(path), ec.value());
  return {};
}

Status PosixFilesystem::create_dirs(const std::string& path) {
  // mkdir -p with our mode (std::filesystem::create_directories asks for 0777 and leaves
  // the rest to the umask, which may be 000).
  if (path.empty()) return Error(ErrorCode::kInvalid, "create directory '': empty path");
  size_t at = path.front() == '/' ? 1 : 0;
  for (;;) {
    const size_t slash = path.find('/', at);
    const std::string prefix = path.substr(0, slash);
    if (!prefix.empty() && prefix != "/" && ::mkdir(prefix.c_str(), kDefaultDirMode) != 0) {
      const int err = errno;
      struct stat st {};
      // An existing directory (or a link to one: above a root, links are the user's choice).
      if (err != EEXIST || ::stat(prefix.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        return Error::from_errno("create directory " + q(prefix), err == EEXIST ? ENOTDIR : err);
    }
    if (slash == std::string::npos) return {};
    at = slash + 1;
  }
}

Result<uint64_t> PosixFilesystem::file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Error::from_errno("stat " + q(path), errno);
  return static_cast<uint64_t>(st.st_size);
}

Result<bool> PosixFilesystem::exists(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT || errno == ENOTDIR) return false;
  return Error::from_errno("stat " + q(path), errno);
}

Result<uint64_t> PosixFilesystem::free_space(const std::string& path) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0)
    return Error::from_errno("statvfs " + q(path), errno);
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

Result<PathKind> PosixFilesystem::path_kind(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return PathKind::kMissing;
    return Error::from_errno("lstat " + q(path), errno);
  }
  if (S_ISLNK(st.st_mode)) return PathKind::kSymlink;
  if (S_ISDIR(st.st_mode)) return PathKind::kDirectory;
  if (S_ISREG(st.st_mode)) return PathKind::kFile;
  return PathKind::kOther;
}

Result<LockAttempt> PosixFilesystem::try_lock_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, kDefaultFileMode);
  if (fd < 0) return Error::from_errno("open " + q(path), errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0)
    return LockAttempt{LockStatus::kAcquired, lock_held_by_fd(fd, path), 0};
  const int err = errno;
  ::close(fd);
  if (err == EWOULDBLOCK) return LockAttempt{LockStatus::kHeld, nullptr, err};
  // No locks on this filesystem (NFS without lockd, some FUSE mounts).
  if (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS)
    return LockAttempt{LockStatus::kUnsupported, nullptr, err};
  return Error::from_errno("flock " + q(path), err);
}

Result<uint64_t> tree_bytes(Filesystem& fs, const std::string& path) {
  SG_ASSIGN_OR_RETURN(PathKind kind, fs.path_kind(path));
  if (kind == PathKind::kFile) {
    auto size = fs.file_size(path);
    // Gone since the lstat (a writer's temp file renamed away): it holds nothing now.
    if (!size.ok() && size.error().code() == ErrorCode::kNotFound) return uint64_t{0};
    return size;
  }
  if (kind != PathKind::kDirectory) return uint64_t{0};
  SG_ASSIGN_OR_RETURN(auto entries, fs.list(path));
  uint64_t total = 0;
  for (const auto& e : entries) {
    SG_ASSIGN_OR_RETURN(uint64_t bytes, tree_bytes(fs, join_path(path, e.name)));
    total += bytes;
  }
  return total;
}

namespace {

Status write_via_temp(Filesystem& fs, const std::string& path, std::string_view data,
                      bool replace) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  auto write_all = [&]() -> Status {
    SG_ASSIGN_OR_RETURN(auto file, fs.open_for_write(tmp, {.exclusive = true}));
    SG_RETURN_IF_ERROR(file->append(std::as_bytes(std::span(data.data(), data.size()))));
    SG_RETURN_IF_ERROR(file->sync());
    SG_RETURN_IF_ERROR(file->close());
    return replace ? fs.rename(tmp, path) : fs.rename_noreplace(tmp, path);
  };
  Status st = write_all();
  if (!st.ok()) {
    (void)fs.remove(tmp);
    return st;
  }
  return fs.sync_dir(parent_dir(path));
}

}  // namespace

Status atomic_write_file(Filesystem& fs, const std::string& path, std::string_view data) {
  return write_via_temp(fs, path, data, /*replace=*/true);
}

Status atomic_create_file(Filesystem& fs, const std::string& path, std::string_view data) {
  return write_via_temp(fs, path, data, /*replace=*/false);
}

}  // namespace shardguard
