// A checkpoint directory that is really a bucket mounted with FUSE (s3fs, goofys,
// mountpoint-s3, rclone mount, gcsfuse, blobfuse) is refused at start with a message that
// points to s3://: on those, rename is a copy and a delete (or unsupported), flock is local to
// one host and a file's size can lag its writes, so the directory's commit protocol would be
// torn exactly when it matters. The bucket itself (s3://BUCKET/PREFIX) has none of these
// problems. Found from /proc/self/mountinfo: the mount that holds the directory (or its
// nearest existing parent) and its filesystem type.
// Thread-safety: pure functions, and one that reads /proc.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"

namespace shardguard::storage {

struct MountFacts {
  std::string mount_point;  // "/mnt/bucket"
  std::string fs_type;      // "fuse.s3fs"
  std::string source;       // "s3fs" or the remote, as mountinfo gives it
};

// The mount of `absolute_path` in `mountinfo` (its text): the longest mount point that is the
// path or a parent of it; nullopt when none (a malformed text included).
std::optional<MountFacts> mount_of(std::string_view absolute_path, std::string_view mountinfo);

// True for the filesystem types of FUSE bucket mounts.
bool is_bucket_mount(std::string_view fs_type);

// kInvalid, naming the mount and the way out, when `dir` lies on a bucket mount; success
// otherwise (and when /proc cannot be read: nothing is known then).
Status refuse_bucket_mount(const std::string& dir);

}  // namespace shardguard::storage
