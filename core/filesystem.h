// The filesystem seam: every durable write in shardguard goes through Filesystem, so
// tests can fail the N-th operation or drop data that was never fsynced (see
// core/fault_fs.h). PosixFilesystem is the production implementation.
//
// Thread-safety: PosixFilesystem is stateless and thread-safe; a WritableFile is used by
// one thread at a time, except write_at() which may be called concurrently for disjoint
// ranges. A RandomAccessFile's methods may be called from any number of threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"

namespace shardguard {

struct OpenOptions {
  bool exclusive = false;  // fail if the file exists (O_EXCL)
  bool direct = false;     // O_DIRECT where supported: buffers, offsets, sizes 4 KiB aligned
};

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Appends at the current end.
  virtual Status append(std::span<const std::byte> data) = 0;
  // Writes at an absolute offset; does not move the append position. On a file opened with
  // direct, a range whose offset, size or buffer is not 4 KiB aligned (a file's last part)
  // is written through the page cache instead: the file drops O_DIRECT from then on, so
  // write it after the aligned ones. Files are never padded and truncated back.
  virtual Status write_at(uint64_t offset, std::span<const std::byte> data) = 0;
  // Reserves space so that later writes cannot fail for lack of it (fallocate).
  virtual Status preallocate(uint64_t size) = 0;
  // Sets the size.
  virtual Status truncate(uint64_t size) = 0;
  // Makes all written data durable (fdatasync).
  virtual Status sync() = 0;
  virtual Status close() = 0;
  virtual const std::string& path() const = 0;
};

// A read-only view of a whole file (mmap). The bytes stay valid while the object lives.
class MappedFile {
 public:
  virtual ~MappedFile() = default;
  virtual std::span<const std::byte> bytes() const = 0;
  virtual const std::string& path() const = 0;
  // How many bytes of [offset, offset + length) are in memory now (the page cache, for a
  // mapped file: mincore), without reading any; nullopt when that cannot be known.
  virtual std::optional<uint64_t> resident_bytes(uint64_t offset, uint64_t length) const {
    (void)offset;
    (void)length;
    return std::nullopt;
  }
};

struct ReadOptions {
  // O_DIRECT where supported (RandomAccessFile::direct() says whether it took): reads then
  // bypass the page cache, and offsets, sizes and buffers must be multiples of
  // kDirectReadAlignment.
  bool direct = false;
};

inline constexpr size_t kDirectReadAlignment = 4096;

// Positional reads of one file (pread), for large reads straight into the caller's memory.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to out.size() bytes at `offset` into `out`, fewer only at the end of the file;
  // returns the count.
  virtual Result<size_t> read_at(uint64_t offset, std::span<std::byte> out) const = 0;
  // The file's size when it was opened.
  virtual uint64_t size() const = 0;
  // True when reads bypass the page cache (ReadOptions::direct took effect).
  virtual bool direct() const = 0;
  virtual const std::string& path() const = 0;

  // Reads exactly out.size() bytes at `offset`; kIo naming the file if it ends first.
  Status read_exact(uint64_t offset, std::span<std::byte> out) const;
};

// Memory for O_DIRECT I/O: 2 MiB aligned and advised to be backed by transparent huge pages
// (where the kernel allows), touched once when allocated. A read or write of a few MiB into
// it is then a few physically contiguous segments, which a block device takes as a few
// large requests; into ordinary 4 KiB pages a device with a segment limit (virtio-blk: 254)
// splits it into requests of ~1 MiB or less, which measured at half the throughput or less.
class DirectIoBuffer {
 public:
  static constexpr size_t kHugePage = 2ull << 20;

  static Result<std::unique_ptr<DirectIoBuffer>> allocate(size_t size);
  ~DirectIoBuffer();
  DirectIoBuffer(const DirectIoBuffer&) = delete;
  DirectIoBuffer& operator=(const DirectIoBuffer&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  DirectIoBuffer(void* mapping, size_t mapped, std::byte* data, size_t size)
      : mapping_(mapping), mapped_(mapped), data_(data), size_(size) {}
  void* mapping_;
  size_t mapped_;
  std::byte* data_;
  size_t size_;
};

struct DirEntry {
  std::string name;
  bool is_dir = false;      // a directory, or a symbolic link to one
  bool is_symlink = false;  // the entry itself is a symbolic link
};

// What a path names, the last component not followed (lstat).
enum class PathKind { kMissing, kFile, kDirectory, kSymlink, kOther };

// An advisory whole-file lock (flock) held until this object is destroyed. The descriptor
// is close-on-exec, so launched processes never inherit (and so never prolong) the lock.
class FileLock {
 public:
  virtual ~FileLock() = default;
  virtual const std::string& path() const = 0;
};

// A lock held through an open descriptor `fd` (flock'ed by the caller), which it owns:
// destroying it closes `fd`, which releases the lock.
std::unique_ptr<FileLock> lock_held_by_fd(int fd, std::string path);

enum class LockStatus {
  kAcquired,     // this process holds the lock now
  kHeld,         // another open file (process) holds it
  kUnsupported,  // the filesystem has no flock (ENOLCK, EOPNOTSUPP: some NFS mounts)
};

struct LockAttempt {
  LockStatus status = LockStatus::kUnsupported;
  std::unique_ptr<FileLock> lock;  // set when kAcquired
  int sys_errno = 0;               // kUnsupported: the errno that said so
};

class Filesystem {
 public:
  virtual ~Filesystem() = default;

  virtual Result<std::unique_ptr<WritableFile>> open_for_write(const std::string& path,
                                                               OpenOptions options = {}) = 0;
  virtual Result<std::unique_ptr<MappedFile>> map_readonly(const std::string& path) = 0;
  // Opens a file for positional reads. The default serves them from map_readonly() (never
  // direct); PosixFilesystem uses pread(2).
  virtual Result<std::unique_ptr<RandomAccessFile>> open_for_read(const std::string& path,
                                                                  ReadOptions options = {});
  // Reads a whole (small) file into memory.
  virtual Result<std::string> read_file(const std::string& path) = 0;
  // Atomically replaces `to` with `from` (rename(2)); not durable until sync_dir().
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  // Moves `from` to `to` only if `to` does not exist (renameat2 RENAME_NOREPLACE, or link(2)
  // and unlink where the filesystem lacks it): kExists when it does, and `from` stays. Not
  // durable until sync_dir(). The default says kUnsupported.
  virtual Status rename_noreplace(const std::string& from, const std::string& to);
  // Makes the directory's entries (creations, renames, removals) durable.
  virtual Status sync_dir(const std::string& dir) = 0;
  virtual Result<std::vector<DirEntry>> list(const std::string& dir) = 0;
  virtual Status remove(const std::string& path) = 0;       // a file or an empty directory
  virtual Status remove_all(const std::string& path) = 0;   // a whole tree
  virtual Status create_dirs(const std::string& path) = 0;  // like mkdir -p
  virtual Result<uint64_t> file_size(const std::string& path) = 0;
  virtual Result<bool> exists(const std::string& path) = 0;
  // Free bytes for an unprivileged user on the filesystem holding `path`.
  virtual Result<uint64_t> free_space(const std::string& path) = 0;
  // What `path` itself is, a symbolic link not followed (lstat). The default says
  // kUnsupported; callers that must not follow links then refuse to act.
  virtual Result<PathKind> path_kind(const std::string& path);
  // Opens `path` (created, 0644, if missing) and tries an exclusive flock without waiting.
  // The default reports kUnsupported (EOPNOTSUPP): such a filesystem has no locks.
  virtual Result<LockAttempt> try_lock_file(const std::string& path);
};

class PosixFilesystem final : public Filesystem {
 public:
  Result<std::unique_ptr<WritableFile>> open_for_write(const std::string& path,
                                                       OpenOptions options) override;
  Result<std::unique_ptr<MappedFile>> map_readonly(const std::string& path) override;
  Result<std::unique_ptr<RandomAccessFile>> open_for_read(const std::string& path,
                                                          ReadOptions options) override;
  Result<std::string> read_file(const std::string& path) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status rename_noreplace(const std::string& from, const std::string& to) override;
  Status sync_dir(const std::string& dir) override;
  Result<std::vector<DirEntry>> list(const std::string& dir) override;
  Status remove(const std::string& path) override;
  Status remove_all(const std::string& path) override;
  Status create_dirs(const std::string& path) override;
  Result<uint64_t> file_size(const std::string& path) override;
  Result<bool> exists(const std::string& path) override;
  Result<uint64_t> free_space(const std::string& path) override;
  Result<PathKind> path_kind(const std::string& path) override;
  Result<LockAttempt> try_lock_file(const std::string& path) override;

  static PosixFilesystem& instance();
};

// Directory part of a path ("a/b/c" -> "a/b", "c" -> ".").
std::string parent_dir(const std::string& path);
// Joins two path parts with one '/'.
std::string join_path(const std::string& a, const std::string& b);

// Bytes of the regular files at or under `path`, symbolic links neither followed nor
// counted (what removing the tree frees, near enough). 0 for a missing path.
Result<uint64_t> tree_bytes(Filesystem& fs, const std::string& path);

// Writes `data` to `path` so that a crash leaves either the old content or the new, never
// a mix: temp file in the same directory, write, fsync, rename over `path`, fsync the
// directory. The temp file is removed on any failure.
Status atomic_write_file(Filesystem& fs, const std::string& path, std::string_view data);

// The same, but only if `path` does not exist yet: kExists when it does (another writer was
// first), and nothing is changed. The commit point of a checkpoint (its manifest) is made so.
Status atomic_create_file(Filesystem& fs, const std::string& path, std::string_view data);

// Modes of what PosixFilesystem creates (the umask may narrow them, never widen them: a
// umask of 000 still gives 0750/0640). RootedFilesystem (core/rooted_fs.h) sets its own
// modes exactly, whatever the umask.
inline constexpr unsigned kDefaultDirMode = 0750;
inline constexpr unsigned kDefaultFileMode = 0640;

// Building blocks for Filesystem implementations that open descriptors themselves
// (core/rooted_fs.cc). Each takes ownership of `fd` (closed on every path); `path` is only
// for messages.
namespace posix {
std::unique_ptr<WritableFile> adopt_writable(int fd, std::string path);
// Maps the whole regular file open at `fd` read-only.
Result<std::unique_ptr<MappedFile>> map_fd(int fd, std::string path);
// Positional reads of the file open at `fd`; `direct`: it was opened with O_DIRECT.
Result<std::unique_ptr<RandomAccessFile>> adopt_readable(int fd, bool direct, std::string path);
// Reads the rest of the file open at `fd` into memory.
Result<std::string> read_fd(int fd, const std::string& path);
// renameat2(RENAME_NOREPLACE), or linkat + unlinkat where the filesystem lacks it; `what`
// starts the message of an error (EEXIST: kExists).
Status rename_noreplace_at(int from_dir, const char* from, int to_dir, const char* to,
                           const std::string& what);
}  // namespace posix

}  // namespace shardguard
