// The Store of a bucket and prefix (s3://BUCKET/PREFIX) over the S3 client: keys are the
// location's relative keys under PREFIX; every write is one PutObject (conditional where the
// caller says) or a multipart upload (one part a block of the shard writer, completed at
// publish()); reads are ranged GETs straight into the caller's memory; listings follow
// ListObjectsV2's continuation tokens. storage/store.h has the table of guarantees.
//
// A retried conditional write whose first try may have landed (a reset after the server
// acted) is read back: the same bytes there mean it was ours.
// Thread-safety: as Store.
#pragma once

#include <memory>
#include <string>

#include "storage/s3/s3_client.h"
#include "storage/store.h"

namespace shardguard::storage {

class S3Store final : public Store {
 public:
  // `client` must outlive the store; `location` must be a bucket.
  S3Store(s3::S3Client& client, Location location);

  const Location& location() const override { return location_; }
  Result<std::string> read(std::string_view key, uint64_t max_bytes) override;
  Result<VersionedObject> read_versioned(std::string_view key, uint64_t max_bytes) override;
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
  Result<size_t> abort_uploads(std::string_view prefix) override;
  S3Store* as_bucket() override { return this; }

  s3::S3Client& client() const { return client_; }
  // The bucket's object key of a location key.
  std::string object_key(std::string_view key) const { return location_.object_key(key); }

 private:
  // Location key of an object key under the prefix; nullopt for one outside it.
  std::optional<std::string> relative(std::string_view object_key) const;
  // The object-key prefix of a listing of `prefix` (a "directory": ends with '/').
  std::string list_prefix(std::string_view prefix) const;

  s3::S3Client& client_;
  Location location_;
};

}  // namespace shardguard::storage
