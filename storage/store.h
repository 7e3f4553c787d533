// A checkpoint location's storage, as objects under keys: what the checkpoint code
// (checkpoint/) reads and writes, the same calls for a directory and for a bucket.
//
// Keys are relative to the location ("step-000000100/manifest.json"), '/'-separated, made in
// checkpoint/layout.h and never from user input unchecked. The two kinds keep each its own
// guarantees behind the same calls:
//
//   call                      directory (DirectoryStore)          bucket (S3Store)
//   put                       temp, fsync, rename, fsync dir      one PUT (atomic by itself)
//   put, kIfAbsent            temp, fsync, link(2), fsync dir     PUT If-None-Match: *
//   put, kIfMatch             (not offered: the flock lease)      PUT If-Match: <etag>
//   begin_upload              temp file, O_DIRECT blocks          multipart upload, one part a
//     finish / publish        fsync / rename + fsync dir          block / CompleteMultipartUpload
//   open_read                 pread (O_DIRECT on request)         ranged GETs
//   list                      readdir                             ListObjectsV2 with '/'
//   remove_many               unlink                              DeleteObjects (1,000 a call)
//
// kExists: a conditional create lost (the key exists). kFenced: an If-Match lost (the record
// changed). kNotFound: no such key. Messages name the key as location().describe(key).
// Thread-safety: every method may be called from any number of threads at once; an Upload's
// write_part() too, for distinct parts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/filesystem.h"
#include "core/result.h"
#include "storage/http.h"  // Interrupt
#include "storage/location.h"

namespace shardguard::storage {

class DirectoryStore;
class S3Store;

// Largest object read() takes whole by default: manifests, sidecars, records.
inline constexpr uint64_t kMaxRecordBytes = 256ull << 20;

struct ObjectInfo {
  std::string key;   // relative to the location
  uint64_t size = 0;
  std::string etag;  // bucket: the ETag without quotes; directory: empty
};

// What lies directly under a prefix: objects, and the next-level "directories" (common
// prefixes), each without the trailing '/'.
struct Listing {
  std::vector<ObjectInfo> objects;
  std::vector<std::string> prefixes;
  // Directory only: symbolic links, which are neither and are never followed (a link named
  // like a step shows as corrupt, naming the link, instead of vanishing).
  std::vector<std::string> links;
};

// A record read with what a compare-and-swap needs.
struct VersionedObject {
  std::string data;
  std::string etag;  // bucket: the ETag without quotes (what If-Match takes); directory: ""
  // How long ago it was last written, by the server's own clock (its Date header minus the
  // object's Last-Modified; 1 s resolution): no clock skew between hosts. nullopt: unknown.
  std::optional<Duration> age;
};

struct PutCondition {
  enum class Kind { kNone, kIfAbsent, kIfMatch };
  Kind kind = Kind::kNone;
  std::string etag;  // kIfMatch

  static PutCondition none() { return {}; }
  static PutCondition if_absent() { return {Kind::kIfAbsent, ""}; }
  static PutCondition if_match(std::string etag) { return {Kind::kIfMatch, std::move(etag)}; }
};

struct UploadOptions {
  uint64_t size = 0;        // the object's total bytes
  uint64_t part_bytes = 0;  // the caller writes parts of exactly this size, but the last
  bool direct_io = true;    // directory: O_DIRECT for whole aligned parts where possible
  // Directory: the temporary file's name (checkpoint/paths.h temp_name()), next to the key.
  std::string temp_key;
  // Asked before each part and while one is sent: a reason stops the upload (kCancelled).
  Interrupt interrupt{};
};

// One object written in parts, possibly by several threads at once.
class Upload {
 public:
  virtual ~Upload() = default;  // aborts an upload that was not published
  // Bytes [offset, offset + data.size()) of the object: `offset` a multiple of part_bytes,
  // `data` exactly part_bytes long unless it holds the object's last byte.
  virtual Status write_part(uint64_t offset, std::span<const std::byte> data) = 0;
  // Every part written: the bytes are durable (fsynced, or every part acknowledged) but not
  // yet visible under the key.
  virtual Status finish() = 0;
  // Makes the object visible under its key (rename; CompleteMultipartUpload).
  virtual Status publish() = 0;
  // Drops what was written. Idempotent; nothing is left under the key.
  virtual void abort() = 0;
};

class Store {
 public:
  virtual ~Store() = default;

  virtual const Location& location() const = 0;

  // A whole small object. kNotFound when missing; kCorrupt when over max_bytes.
  virtual Result<std::string> read(std::string_view key, uint64_t max_bytes = kMaxRecordBytes) = 0;
  // A whole small object with its ETag and age; kNotFound when missing. The default: read()
  // with no version (a directory).
  virtual Result<VersionedObject> read_versioned(std::string_view key,
                                                 uint64_t max_bytes = kMaxRecordBytes) {
    SG_ASSIGN_OR_RETURN(std::string data, read(key, max_bytes));
    return VersionedObject{std::move(data), "", std::nullopt};
  }
  // Size (and ETag) of a key; nullopt when missing.
  virtual Result<std::optional<ObjectInfo>> stat(std::string_view key) = 0;
  // Positional reads. `known_size`, when given (from a manifest), spares a lookup; a key
  // whose real size differs fails its first read past the end.
  virtual Result<std::unique_ptr<RandomAccessFile>> open_read(
      std::string_view key, ReadOptions options = {},
      std::optional<uint64_t> known_size = std::nullopt) = 0;
  // The whole object in memory: a mapping of the file, or the bucket's bytes fetched.
  virtual Result<std::unique_ptr<MappedFile>> map(std::string_view key) = 0;
  // What lies directly under `prefix` ("" for the location's root). A missing directory
  // or an empty prefix is an empty listing.
  virtual Result<Listing> list(std::string_view prefix) = 0;
  // Every object at any depth under `prefix`.
  virtual Result<std::vector<ObjectInfo>> list_all(std::string_view prefix) = 0;

  // Writes a whole object atomically: readers see the old bytes or the new, never a mix.
  // Returns the new ETag (bucket) or "" (directory).
  virtual Result<std::string> put(std::string_view key, std::string_view data,
                                  PutCondition condition = {}) = 0;
  virtual Result<std::unique_ptr<Upload>> begin_upload(std::string_view key,
                                                       const UploadOptions& options) = 0;
  // Removes one key; a missing one is success.
  virtual Status remove(std::string_view key) = 0;
  // Removes many keys (missing ones are success); stops at the first failure, naming it.
  virtual Status remove_many(std::span<const std::string> keys) = 0;
  // Aborts the unfinished uploads under `prefix` (a bucket's multipart uploads left by failed
  // or killed writers, which hold storage and are listed nowhere else); returns how many. A
  // directory has none: its temp files are found and removed by name.
  virtual Result<size_t> abort_uploads(std::string_view prefix) { return size_t{0}; }

  // The kind's own extras (the flock lease, renames, free space; multipart clean-up).
  virtual DirectoryStore* as_directory() { return nullptr; }
  virtual S3Store* as_bucket() { return nullptr; }

  std::string describe(std::string_view key) const { return location().describe(key); }
};

// The Store a component was given, or, when it was given none, a directory's own over a
// filesystem (tests and single-directory tools build no Store themselves).
class StoreRef {
 public:
  StoreRef(Store* given, Filesystem& fs, const std::string& dir);
  ~StoreRef();
  StoreRef(StoreRef&&) noexcept;
  Store& get() const { return *store_; }
  Store* operator->() const { return store_; }

 private:
  std::unique_ptr<Store> owned_;
  Store* store_;
};

// "a" + "/" + "b", either side may be empty.
std::string join_key(std::string_view a, std::string_view b);

}  // namespace shardguard::storage
