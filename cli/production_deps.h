// The real dependency bundle (io/deps.h), built here and nowhere else: the Asio loop and
// timers, the real clock and filesystem, fork/exec processes, Beast HTTP, a seeded random
// source and a worker for slow work.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/rooted_fs.h"
#include "io/deps.h"

namespace shardguard::io {
class EventLoop;
}

namespace shardguard::cli {

class ProductionDeps {
 public:
  // `fs`: the filesystem of the bundle (`shardguard run` passes a RootedFilesystem over its
  // run and checkpoint directories); it must outlive the bundle. Default: PosixFilesystem.
  // `checkpoints`: the job's checkpoint Store when it is a bucket (cli/checkpoint_location.h);
  // nullptr for a directory, read through `fs`.
  explicit ProductionDeps(Filesystem& fs = PosixFilesystem::instance(),
                          storage::Store* checkpoints = nullptr);
  ~ProductionDeps();
  ProductionDeps(const ProductionDeps&) = delete;
  ProductionDeps& operator=(const ProductionDeps&) = delete;

  const io::Deps& deps() const;
  io::EventLoop& loop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The filesystem of `shardguard run`: nothing below the run and checkpoint directories is
// followed, and what the supervisor creates there is 0750/0640 with `group` (when set),
// whatever the umask (core/rooted_fs.h); other paths (/proc, hooks' files) as they are. A
// checkpoint location that is a bucket is no root of it.
std::unique_ptr<RootedFilesystem> job_filesystem(const std::string& run_dir,
                                                 const std::string& checkpoint_dir,
                                                 std::optional<uint32_t> group);

}  // namespace shardguard::cli
