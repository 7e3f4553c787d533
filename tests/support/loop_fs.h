// A small real ext4 filesystem for disk-full tests: an image file in $TMPDIR, formatted with
// mkfs.ext4 and loop-mounted (tmpfs has no O_DIRECT, and ENOSPC should come from a real
// block filesystem). Needs root, mkfs.ext4 and a free loop device; where mounting is not
// permitted, LoopFs::mount() returns null and says why, and the test skips with that message.
//
//   std::string why;
//   auto disk = LoopFs::mount(64, &why);
//   if (!disk) { WARN("skipped: " << why); return; }
//   ... write under disk->path() ...
//   disk->fill(64 << 10);  // leave ~64 KiB free
//
// The destructor unmounts (lazily if something is still open) and removes the image.
// Thread-safety: one test thread.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/command.h"
#include "tests/support/temp_dir.h"

namespace shardguard::testing {

class LoopFs {
 public:
  // Formats a `mib` MiB ext4 image and mounts it; null with `*why_not` set when it cannot.
  static std::unique_ptr<LoopFs> mount(uint64_t mib, std::string* why_not) {
    auto fs = std::unique_ptr<LoopFs>(new LoopFs());
    const std::string image = fs->base_ / "disk.img";
    const std::string mnt = fs->base_ / "mnt";
    if (::geteuid() != 0) return none(why_not, "loop mounts need root");
    auto r = run_command("truncate -s " + std::to_string(mib) + "M " + image + " && mkdir -p " +
                         mnt + " && mkfs.ext4 -q -F -m 0 " + image);
    if (r.exit_code != 0) return none(why_not, "mkfs.ext4 failed: " + r.err);
    r = run_command("mount -o loop " + image + " " + mnt);
    if (r.exit_code != 0) return none(why_not, "mount -o loop failed: " + r.err);
    fs->mounted_ = true;
    fs->path_ = mnt;
    return fs;
  }

  ~LoopFs() {
    if (mounted_ && run_command("umount " + path_).exit_code != 0)
      (void)run_command("umount -l " + path_);
  }
  LoopFs(const LoopFs&) = delete;
  LoopFs& operator=(const LoopFs&) = delete;

  // The mount point.
  const std::string& path() const { return path_; }

  // Free bytes now (as an unprivileged writer would see them).
  uint64_t free_bytes() const {
    struct statvfs st {};
    if (::statvfs(path_.c_str(), &st) != 0) return 0;
    return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  }

  // Writes `<path>/filler` until the disk is full, then gives back `leave` bytes by
  // truncating it (rounded to whole blocks). Returns false if the disk never filled.
  bool fill(uint64_t leave) {
    const std::string filler = path_ + "/filler";
    int fd = ::open(filler.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    std::vector<char> chunk(1 << 20, 'f');
    bool full = false;
    for (int i = 0; i < 1 << 16 && !full; ++i) {
      size_t n = chunk.size();
      while (n >= 512 && !full) {  // down to the last few blocks
        const ssize_t w = ::write(fd, chunk.data(), n);
        if (w >= 0) break;
        if (errno != ENOSPC) {
          ::close(fd);
          return false;
        }
        if (n == 512) full = true;
        n /= 2;
      }
    }
    (void)::fsync(fd);
    struct stat st {};
    (void)::fstat(fd, &st);
    if (full && leave > 0) {
      const off_t keep =
          st.st_size > static_cast<off_t>(leave) ? st.st_size - static_cast<off_t>(leave) : 0;
      (void)::ftruncate(fd, keep);
      (void)::fsync(fd);
    }
    ::close(fd);
    return full;
  }

  // Removes the filler: the disk has room again.
  void unfill() {
    ::unlink((path_ + "/filler").c_str());
    ::sync();
  }

 private:
  LoopFs() = default;
  static std::unique_ptr<LoopFs> none(std::string* why_not, std::string why) {
    if (why_not != nullptr) *why_not = std::move(why);
    return nullptr;
  }

  TempDir base_;
  std::string path_;
  bool mounted_ = false;
};

}  // namespace shardguard::testing
