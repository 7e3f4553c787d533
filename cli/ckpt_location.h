// The DIR of a `shardguard ckpt` subcommand: a directory, read through a RootedFilesystem
// rooted at it (never following a link planted below it), or a bucket (s3://BUCKET/PREFIX)
// reached as the AWS CLI would (AWS_ENDPOINT_URL(_S3), AWS_REGION, AWS_PROFILE and the
// credential chain; SHARDGUARD_S3_* as a rank gets them). And the step the subcommand works
// on: --step N, or the newest complete one.
// Thread-safety: one command at a time.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "checkpoint/catalog.h"
#include "checkpoint/reader.h"
#include "cli/checkpoint_location.h"
#include "core/rooted_fs.h"

namespace shardguard::cli {

class CkptLocation {
 public:
  static Result<CkptLocation> open(const std::string& dir);

  storage::Store& store() const { return opened_.store(); }
  // The directory's rooted filesystem (PosixFilesystem for a bucket: nothing is read locally).
  Filesystem& fs() const {
    if (rooted_) return *rooted_;
    return PosixFilesystem::instance();
  }
  const storage::Location& location() const { return opened_.location; }
  bool bucket() const { return opened_.bucket(); }

 private:
  std::unique_ptr<RootedFilesystem> rooted_;
  OpenedLocation opened_;
};

// --step N (kNotFound when nothing of it is there), or the newest complete one; classified
// with `verify`.
Result<checkpoint::CatalogEntry> pick_step(storage::Store& store, std::optional<uint64_t> step,
                                           checkpoint::Verify verify);
// The chosen step opened for reading; an incomplete or corrupt one (or a quarantined one,
// which the catalog never lists) is kCorrupt saying why.
Result<checkpoint::CheckpointReader> open_complete(storage::Store& store,
                                                   std::optional<uint64_t> step);

}  // namespace shardguard::cli
