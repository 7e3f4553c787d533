// The checkpoint location of a command, from `--checkpoint-dir`, `[job] checkpoint_dir` or a
// `ckpt` subcommand's DIR: checked (a bucket-backed FUSE mount given as a directory is
// refused, pointing to s3://), reached (a bucket's endpoint, region and credentials resolved
// as the AWS CLI resolves them) and, where asked, probed (storage/connect.h). The Store goes
// into the dependency bundle; the resolved options to the ranks.
// Thread-safety: one call at a time; the connection's Store is thread-safe.
#pragma once

#include <memory>
#include <string>

#include "core/filesystem.h"
#include "core/result.h"
#include "storage/connect.h"
#include "storage/location.h"
#include "storage/s3/s3_options.h"

namespace shardguard::cli {

struct OpenedLocation {
  storage::Location location;
  std::shared_ptr<storage::Connection> connection;

  bool bucket() const { return location.is_bucket(); }
  storage::Store& store() const { return connection->store(); }
  // The bundle's Store: a bucket's; nullptr for a directory (components read it through the
  // bundle's own filesystem, a RootedFilesystem under `shardguard run`).
  storage::Store* bundle_store() const { return bucket() ? &store() : nullptr; }
  // "s3://b/p (endpoint http://127.0.0.1:7480, region us-east-1, path-style requests,
  // credentials from the environment)" or the directory's path.
  std::string describe() const;
};

// kInvalid for a bad location or setting (the caller exits 2 or 78), kNotFound for a missing
// bucket or no credentials, kUnsupported for a bucket that ignores conditional writes; other
// errors are transport failures. `fs`: a directory's filesystem.
Result<OpenedLocation> open_location(const std::string& text, const storage::s3::S3Options& s3,
                                     Filesystem& fs, bool probe);

}  // namespace shardguard::cli
