// The Store of a checkpoint directory: keys are paths relative to it, every call goes
// through the injected Filesystem (a RootedFilesystem under `shardguard run`, which never
// follows a link below the directory; FaultInjectingFilesystem in crash tests), and every
// write keeps the directory's commit rules: temp file in the same directory, fsync, rename
// (or rename without replacing for a create-if-absent), fsync of the directory.
// Thread-safety: as Store; the Filesystem must be thread-safe (all of ours are).
#pragma once

#include <string>

#include "core/filesystem.h"
#include "storage/store.h"

namespace shardguard::storage {

class DirectoryStore final : public Store {
 public:
  // `fs` must outlive the store.
  DirectoryStore(Filesystem& fs, std::string dir);

  const Location& location() const override { return location_; }
  Result<std::string> read(std::string_view key, uint64_t max_bytes) override;
  Result<std::optional<ObjectInfo>> stat(std::string_view key) override;
  Result<std::unique_ptr<RandomAccessFile>> open_read(std::string_view key, ReadOptions options,
                                                      std::optional<uint64_t> known_size) override;
  Result<std::unique_ptr<MappedFile>> map(std::string_view key) override;
  Result<Listing> list(std::string_view prefix) override;
  Result<std::vector<ObjectInfo>> list_all(std::string_view prefix) override;
  Result<std::string> put(std::string_view key, std::string_view data,
                          PutCondition condition) override;
  Result<std::unique_ptr<Upload>> begin_upload(std::string_view key,
                                               const UploadOptions& options) override;
  Status remove(std::string_view key) override;
  Status remove_many(std::span<const std::string> keys) override;
  DirectoryStore* as_directory() override { return this; }

  // The directory's own extras, for the code that keeps POSIX semantics (the flock lease,
  // quarantine by rename, free space, links never followed).
  Filesystem& fs() const { return fs_; }
  const std::string& dir() const { return location_.path; }
  // The path of `key`.
  std::string path(std::string_view key) const;

 private:
  Filesystem& fs_;
  Location location_;
};

}  // namespace shardguard::storage
