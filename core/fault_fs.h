// FaultInjectingFilesystem: a test wrapper over another Filesystem (leveldb's
// FaultInjectionTestEnv, in small). It can
//   - fail the N-th mutating operation (and optionally every one after it) with an errno,
//     as a full disk or an I/O error would;
//   - simulate a power cut: simulate_crash() drops every byte that was not fsynced and
//     undoes every directory change (create, rename, remove of a file it made) that was not
//     followed by sync_dir() of that directory.
//   - fail the N-th read operation (map, open for reading, read_at, read_file), counted
//     apart from the mutating ones so that arming one never shifts the other;
//   - answer every flock as a filesystem without locks would (ENOLCK, EOPNOTSUPP: some NFS
//     mounts), to test the paths that must do without one.
// Only files written through this wrapper are tracked. Thread-safe (one mutex).
#pragma once

#include <cerrno>
#include <map>
#include <mutex>
#include <set>

#include "core/filesystem.h"

namespace shardguard {

class FaultInjectingFilesystem final : public Filesystem {
 public:
  explicit FaultInjectingFilesystem(Filesystem& base) : base_(base) {}

  // The n-th mutating operation from now (1 = the next one) fails with `err`; with
  // `sticky`, every later one fails too (a disk that stays full).
  void fail_nth_operation(int n, int err = EIO, bool sticky = false);
  // The n-th read operation from now fails with `err`; with `sticky`, every later one too.
  void fail_nth_read(int n, int err = EIO, bool sticky = false);
  // From now on try_lock_file() fails as flock(2) does with `err` (ENOLCK or EOPNOTSUPP:
  // kUnsupported; EWOULDBLOCK: kHeld; others: an error); 0 passes locks through again.
  void set_lock_errno(int err);
  // Disarms both kinds of fault (not set_lock_errno()).
  void clear_faults();
  // Mutating operations seen so far (open, write, sync, rename, remove, ...).
  int operations() const;
  // Read operations seen so far (map_readonly, open_for_read, read_at, read_file).
  int read_operations() const;

  // Power cut: truncates each tracked file to its last fsynced length and rolls back
  // directory entries not made durable by sync_dir(). Further writes to files opened
  // before the crash fail.
  Status simulate_crash();

  Result<std::unique_ptr<WritableFile>> open_for_write(const std::string& path,
                                                       OpenOptions options) override;
  Result<std::unique_ptr<MappedFile>> map_readonly(const std::string& path) override;
  Result<std::unique_ptr<RandomAccessFile>> open_for_read(const std::string& path,
                                                          ReadOptions options) override;
  Result<std::string> read_file(const std::string& path) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status rename_noreplace(const std::string& from, const std::string& to) override;
  Status sync_dir(const std::string& dir) override;
  Result<std::vector<DirEntry>> list(const std::string& dir) override { return base_.list(dir); }
  Status remove(const std::string& path) override;
  Status remove_all(const std::string& path) override;
  Status create_dirs(const std::string& path) override;
  Result<uint64_t> file_size(const std::string& path) override { return base_.file_size(path); }
  Result<bool> exists(const std::string& path) override { return base_.exists(path); }
  Result<uint64_t> free_space(const std::string& path) override { return base_.free_space(path); }
  Result<PathKind> path_kind(const std::string& path) override { return base_.path_kind(path); }
  // A mutating operation (it may create the file); see set_lock_errno().
  Result<LockAttempt> try_lock_file(const std::string& path) override;

 private:
  class File;
  friend class File;
  class ReadFile;
  friend class ReadFile;

  // Counts one mutating operation; returns the injected error if this one must fail.
  // Removals are exempt from ENOSPC faults (`frees_space`), as on a real full disk.
  Status maybe_fail(const std::string& what, bool frees_space = false);
  // Counts one read operation; returns the injected error if this one must fail.
  Status maybe_fail_read(const std::string& what);
  void note_written(const std::string& path, uint64_t end);
  void note_synced(const std::string& path);

  struct FileState {
    uint64_t synced_size = 0;  // bytes known durable
    bool synced_ever = false;
  };
  // A directory change that is lost in a crash unless the directory is synced first.
  struct PendingDirOp {
    enum Kind { kCreate, kRename } kind;
    std::string from;  // kRename: the old name
    std::string to;    // the new (or created) name
  };

  Filesystem& base_;
  mutable std::mutex mu_;
  int ops_ = 0;
  int fail_at_ = 0;  // 0: no fault armed
  int fail_errno_ = EIO;
  bool sticky_ = false;
  int reads_ = 0;
  int fail_read_at_ = 0;  // 0: no read fault armed
  int fail_read_errno_ = EIO;
  bool read_sticky_ = false;
  int lock_errno_ = 0;  // 0: locks pass through to the base filesystem
  uint64_t crash_epoch_ = 0;
  std::map<std::string, FileState> files_;
  std::vector<PendingDirOp> pending_;
};

}  // namespace shardguard
