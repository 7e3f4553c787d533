// The filesystem seam: every durable write in shardguard goes through Filesystem, so
// tests can fail the N-th operation or drop data that was never fsynced (see
// core/fault_fs.h). PosixFilesystem is the production implementation.
//
// Thread-safety: PosixFilesystem is stateless and thread-safe; a WritableFile is used by
// one thread at a time, except write_at() which may be called concurrently for disjoint
// ranges.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
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
  // Writes at an absolute offset; does not move the append position.
  virtual Status write_at(uint64_t offset, std::span<const std::byte> data) = 0;
  // Reserves space so that later writes cannot fail for lack of it (fallocate).
  virtual Status preallocate(uint64_t size) = 0;
  // Sets the size (used after O_DIRECT writes padded to alignment).
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
};

struct DirEntry {
  std::string name;
  bool is_dir = false;
};

class Filesystem {
 public:
  virtual ~Filesystem() = default;

  virtual Result<std::unique_ptr<WritableFile>> open_for_write(const std::string& path,
                                                               OpenOptions options = {}) = 0;
  virtual Result<std::unique_ptr<MappedFile>> map_readonly(const std::string& path) = 0;
  // Reads a whole (small) file into memory.
  virtual Result<std::string> read_file(const std::string& path) = 0;
  // Atomically replaces `to` with `from` (rename(2)); not durable until sync_dir().
  virtual Status rename(const std::string& from, const std::string& to) = 0;
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
};

class PosixFilesystem final : public Filesystem {
 public:
  Result<std::unique_ptr<WritableFile>> open_for_write(const std::string& path,
                                                       OpenOptions options) override;
  Result<std::unique_ptr<MappedFile>> map_readonly(const std::string& path) override;
  Result<std::string> read_file(const std::string& path) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status sync_dir(const std::string& dir) override;
  Result<std::vector<DirEntry>> list(const std::string& dir) override;
  Status remove(const std::string& path) override;
  Status remove_all(const std::string& path) override;
  Status create_dirs(const std::string& path) override;
  Result<uint64_t> file_size(const std::string& path) override;
  Result<bool> exists(const std::string& path) override;
  Result<uint64_t> free_space(const std::string& path) override;

  static PosixFilesystem& instance();
};

// Directory part of a path ("a/b/c" -> "a/b", "c" -> ".").
std::string parent_dir(const std::string& path);
// Joins two path parts with one '/'.
std::string join_path(const std::string& a, const std::string& b);

// Writes `data` to `path` so that a crash leaves either the old content or the new, never
// a mix: temp file in the same directory, write, fsync, rename over `path`, fsync the
// directory. The temp file is removed on any failure.
Status atomic_write_file(Filesystem& fs, const std::string& path, std::string_view data);

}  // namespace shardguard
