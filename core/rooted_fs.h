// RootedFilesystem: a Filesystem that never follows a symbolic link below its roots.
//
// Each root is a directory shardguard owns (the checkpoint directory, the run directory, an
// export's --out). The root's own path may pass through links (many users keep
// `checkpoints -> /mnt/nvme/...`): it is resolved once, on first use, and then held open as
// a directory descriptor. Every path at or below a root is resolved from that descriptor
// one component at a time with openat(O_NOFOLLOW | O_DIRECTORY); the last component is
// opened with O_NOFOLLOW too. So
//   - a link anywhere below a root is refused, naming it (never followed, never deleted
//     through: removals unlink the link itself), and '..' below a root is refused;
//   - only regular files are opened as files (a FIFO, a device, a socket is refused at once,
//     without blocking) and only real directories as directories;
//   - what it creates gets exactly the configured modes (0750 for directories, 0640 for
//     files by default; set with fchmod, so the umask has no say) and, when configured, the
//     job's group (directories then carry set-group-ID, so files the ranks create inside
//     inherit the group too). A file truncated for rewriting must be a regular file with
//     one link (a hard link planted to another file is refused).
// A path outside every root goes to the `outside` filesystem when one is given (the
// supervisor reads /proc through the same seam), else it is refused with kInvalid.
//
// Thread-safety: every method may be called from any thread; the root descriptors are
// opened under a mutex and never change once open.
#pragma once

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/filesystem.h"

namespace shardguard {

struct RootOptions {
  std::string path;                       // the root as configured (may pass through links)
  unsigned dir_mode = kDefaultDirMode;    // directories created below it (and it, if made)
  unsigned file_mode = kDefaultFileMode;  // files created below it
  std::optional<gid_t> group;             // new files and directories get this group
};

class RootedFilesystem final : public Filesystem {
 public:
  // `roots` may nest (the deepest one holding a path resolves it, so an inner root may itself
  // be a link like any root). `outside`: serves paths outside every root
  // (nullptr: those are refused). A missing root is created by create_dirs() of it or of a
  // path below it (mkdir -p, following links above it, as the user's own path).
  explicit RootedFilesystem(std::vector<RootOptions> roots, Filesystem* outside = nullptr);
  ~RootedFilesystem() override;
  RootedFilesystem(const RootedFilesystem&) = delete;
  RootedFilesystem& operator=(const RootedFilesystem&) = delete;

  // One root, nothing outside it.
  static std::unique_ptr<RootedFilesystem> single(RootOptions root);

  Result<std::unique_ptr<WritableFile>> open_for_write(const std::string& path,
                                                       OpenOptions options) override;
  Result<std::unique_ptr<MappedFile>> map_readonly(const std::string& path) override;
  Result<std::unique_ptr<RandomAccessFile>> open_for_read(const std::string& path,
                                                          ReadOptions options) override;
  Result<std::string> read_file(const std::string& path) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status rename_noreplace(const std::string& from, const std::string& to) override;
  Status sync_dir(const std::string& dir) override;
  // Entries as they are: is_dir only for a real directory, a link is is_symlink only.
  Result<std::vector<DirEntry>> list(const std::string& dir) override;
  Status remove(const std::string& path) override;
  Status remove_all(const std::string& path) override;
  Status create_dirs(const std::string& path) override;
  // Of a regular file only; a link or a non-regular file is kInvalid naming it.
  Result<uint64_t> file_size(const std::string& path) override;
  // True for anything at the path, a link included (lstat); false when missing.
  Result<bool> exists(const std::string& path) override;
  Result<uint64_t> free_space(const std::string& path) override;
  Result<PathKind> path_kind(const std::string& path) override;
  Result<LockAttempt> try_lock_file(const std::string& path) override;

 private:
  struct Root;
  struct Resolved;
  class Fd;

  // Which root holds `path`, and its components below the root; nullopt when none does.
  Result<std::optional<Resolved>> resolve(const std::string& path) const;
  // The root's descriptor, opening it on first use; kNotFound while it does not exist.
  Result<int> root_fd(Root& root) const;
  // Opens the directory at `r`'s first `count` components (the root for 0).
  Result<Fd> open_dir(const Resolved& r, size_t count) const;
  // Applies the root's mode and group to a descriptor this call created.
  Status set_owner_and_mode(const Resolved& r, int fd, bool dir) const;
  Result<Fd> open_regular_for_read(const std::string& path, bool direct, bool* took_direct) const;

  std::vector<std::unique_ptr<Root>> roots_;
  Filesystem* outside_;
  mutable std::mutex mu_;  // guards opening the root descriptors
};

}  // namespace shardguard
