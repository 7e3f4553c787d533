#include "storage/s3/s3_store.h"

#include <algorithm>
#include <cstring>
#include <mutex>

namespace shardguard::storage {
namespace {

std::span<const std::byte> as_bytes(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

// Ranged GETs of one object, straight into the caller's buffer.
class S3RandomAccessFile final : public RandomAccessFile {
 public:
  S3RandomAccessFile(s3::S3Client& client, std::string bucket, std::string key, uint64_t size,
                     std::string url)
      : client_(client),
        bucket_(std::move(bucket)),
        key_(std::move(key)),
        size_(size),
        url_(std::move(url)) {}

  Result<size_t> read_at(uint64_t offset, std::span<std::byte> out) const override {
    if (offset >= size_ || out.empty()) return size_t{0};
    const uint64_t n = std::min<uint64_t>(out.size(), size_ - offset);
    SG_ASSIGN_OR_RETURN(auto got,
                        client_.get_object(bucket_, key_, std::pair{offset, n}, out.first(n)));
    if (got.bytes < n && got.object_size != size_)
      return Error(ErrorCode::kCorrupt, "'" + url_ + "' has " + std::to_string(got.object_size) +
                                            " bytes, " + std::to_string(size_) + " expected");
    return static_cast<size_t>(got.bytes);
  }
  uint64_t size() const override { return size_; }
  bool direct() const override { return false; }
  const std::string& path() const override { return url_; }

 private:
  s3::S3Client& client_;
  std::string bucket_;
  std::string key_;
  uint64_t size_;
  std::string url_;
};

// A whole object fetched into memory, as a "mapping".
class HeapMappedFile final : public MappedFile {
 public:
  HeapMappedFile(std::string bytes, std::string url)
      : bytes_(std::move(bytes)), url_(std::move(url)) {}
  std::span<const std::byte> bytes() const override { return as_bytes(bytes_); }
  const std::string& path() const override { return url_; }

 private:
  std::string bytes_;
  std::string url_;
};

// A multipart upload: created at once, one part per write_part(), completed at publish().
// An object of at most one part is one PutObject instead (S3 requires every part but the
// last to be 5 MiB or more, and a small file gains nothing from parts).
class S3Upload final : public Upload {
 public:
  S3Upload(s3::S3Client& client, std::string bucket, std::string key, UploadOptions options,
           std::string upload_id)
      : client_(client),
        bucket_(std::move(bucket)),
        key_(std::move(key)),
        options_(std::move(options)),
        upload_id_(std::move(upload_id)) {
    const uint64_t parts =
        options_.part_bytes == 0 ? 1 : (options_.size + options_.part_bytes - 1) / options_.part_bytes;
    etags_.resize(std::max<uint64_t>(parts, 1));
  }
  ~S3Upload() override { abort(); }

  Status write_part(uint64_t offset, std::span<const std::byte> data) override {
    const std::string url = s3::S3Client::url_of(bucket_, key_);
    if (options_.part_bytes == 0 || offset % options_.part_bytes != 0)
      return Error(ErrorCode::kInternal, url + ": a part at offset " + std::to_string(offset) +
                                             " is not on a part boundary");
    const uint64_t index = offset / options_.part_bytes;
    if (index >= etags_.size())
      return Error(ErrorCode::kInternal, url + ": a part past the object's end");
    if (upload_id_.empty()) {
      // The single-part object: one plain PUT (the key is this attempt's own).
      SG_RETURN_IF_ERROR(client_.put_object(bucket_, key_, data, false, std::nullopt,
                                            /*sign_body=*/false, nullptr, options_.interrupt));
      std::lock_guard lock(mu_);
      etags_[index] = "put";
      return {};
    }
    SG_ASSIGN_OR_RETURN(std::string etag,
                        client_.upload_part(bucket_, key_, upload_id_,
                                            static_cast<uint32_t>(index + 1), data,
                                            options_.interrupt));
    std::lock_guard lock(mu_);
    etags_[index] = std::move(etag);
    return {};
  }

  Status finish() override {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < etags_.size(); ++i)
      if (etags_[i].empty())
        return Error(ErrorCode::kInternal, s3::S3Client::url_of(bucket_, key_) + ": part " +
                                               std::to_string(i + 1) + " was never written");
    return {};
  }

  Status publish() override {
    SG_RETURN_IF_ERROR(finish());
    if (!upload_id_.empty()) {
      std::vector<s3::CompletedPart> parts;
      for (size_t i = 0; i < etags_.size(); ++i)
        parts.push_back({static_cast<uint32_t>(i + 1), etags_[i]});
      SG_RETURN_IF_ERROR(client_.complete_multipart(bucket_, key_, upload_id_, parts,
                                                    options_.size, options_.interrupt));
    }
    published_ = true;
    return {};
  }

  void abort() override {
    if (published_ || aborted_) return;
    aborted_ = true;
    if (!upload_id_.empty()) {
      (void)client_.abort_multipart(bucket_, key_, upload_id_);
    } else if (std::any_of(etags_.begin(), etags_.end(), [](auto& e) { return !e.empty(); })) {
      const std::string key = key_;
      (void)client_.delete_objects(std::span(&key, 1), bucket_);
    }
  }

 private:
  s3::S3Client& client_;
  std::string bucket_;
  std::string key_;
  UploadOptions options_;
  std::string upload_id_;  // empty: a single PutObject
  std::mutex mu_;
  std::vector<std::string> etags_;  // by mu_, one per part
  bool published_ = false;
  bool aborted_ = false;
};

}  // namespace

S3Store::S3Store(s3::S3Client& client, Location location)
    : client_(client), location_(std::move(location)) {}

std::optional<std::string> S3Store::relative(std::string_view object_key) const {
  if (location_.prefix.empty()) return std::string(object_key);
  const std::string base = location_.prefix + "/";
  if (!object_key.starts_with(base)) return std::nullopt;
  return std::string(object_key.substr(base.size()));
}

std::string S3Store::list_prefix(std::string_view prefix) const {
  std::string p = object_key(prefix);
  if (!p.empty()) p += '/';
  return p;
}

Result<std::string> S3Store::read(std::string_view key, uint64_t max_bytes) {
  SG_ASSIGN_OR_RETURN(auto v, read_versioned(key, max_bytes));
  return std::move(v.data);
}

Result<VersionedObject> S3Store::read_versioned(std::string_view key, uint64_t max_bytes) {
  auto got = client_.get_object(location_.bucket, object_key(key), std::nullopt, std::nullopt,
                                max_bytes);
  if (!got.ok()) {
    if (got.error().code() == ErrorCode::kIo &&
        got.error().message().find("larger than") != std::string::npos)
      return Error(ErrorCode::kCorrupt, "'" + describe(key) + "' is larger than the " +
                                            std::to_string(max_bytes) +
                                            " bytes such a record may have");
    return std::move(got).error();
  }
  return VersionedObject{std::move(got->body), std::move(got->etag), got->age};
}

Result<std::optional<ObjectInfo>> S3Store::stat(std::string_view key) {
  SG_ASSIGN_OR_RETURN(auto head, client_.head_object(location_.bucket, object_key(key)));
  if (!head) return std::optional<ObjectInfo>();
  return std::optional<ObjectInfo>(ObjectInfo{std::string(key), head->size, head->etag});
}

Result<std::unique_ptr<RandomAccessFile>> S3Store::open_read(std::string_view key,
                                                             ReadOptions /*options*/,
                                                             std::optional<uint64_t> known_size) {
  uint64_t size = 0;
  if (known_size) {
    size = *known_size;
  } else {
    SG_ASSIGN_OR_RETURN(auto info, stat(key));
    if (!info) return Error(ErrorCode::kNotFound, "'" + describe(key) + "': no such object");
    size = info->size;
  }
  return std::unique_ptr<RandomAccessFile>(std::make_unique<S3RandomAccessFile>(
      client_, location_.bucket, object_key(key), size, describe(key)));
}

Result<std::unique_ptr<MappedFile>> S3Store::map(std::string_view key) {
  auto got = client_.get_object(location_.bucket, object_key(key), std::nullopt, std::nullopt,
                                std::numeric_limits<uint64_t>::max());
  if (!got.ok()) return std::move(got).error();
  return std::unique_ptr<MappedFile>(
      std::make_unique<HeapMappedFile>(std::move(got->body), describe(key)));
}

Result<Listing> S3Store::list(std::string_view prefix) {
  Listing out;
  const std::string p = list_prefix(prefix);
  std::string token;
  for (int page = 0; page < 1'000'000; ++page) {
    SG_ASSIGN_OR_RETURN(auto r, client_.list_objects(location_.bucket, p, "/", token));
    for (auto& o : r.contents)
      if (auto k = relative(o.key)) out.objects.push_back({std::move(*k), o.size, o.etag});
    for (auto& c : r.common_prefixes) {
      while (c.ends_with('/')) c.pop_back();
      if (auto k = relative(c)) out.prefixes.push_back(std::move(*k));
    }
    if (!r.is_truncated) return out;
    if (r.next_continuation_token.empty() || r.next_continuation_token == token)
      return Error(ErrorCode::kIo, "ListObjectsV2 " + describe(prefix) +
                                       ": a truncated page without a new continuation token");
    token = std::move(r.next_continuation_token);
  }
  return Error(ErrorCode::kIo, "ListObjectsV2 " + describe(prefix) + ": too many pages");
}

Result<std::vector<ObjectInfo>> S3Store::list_all(std::string_view prefix) {
  std::vector<ObjectInfo> out;
  const std::string p = list_prefix(prefix);
  std::string token;
  for (int page = 0; page < 1'000'000; ++page) {
    SG_ASSIGN_OR_RETURN(auto r, client_.list_objects(location_.bucket, p, "", token));
    for (auto& o : r.contents)
      if (auto k = relative(o.key)) out.push_back({std::move(*k), o.size, o.etag});
    if (!r.is_truncated) return out;
    if (r.next_continuation_token.empty() || r.next_continuation_token == token)
      return Error(ErrorCode::kIo, "ListObjectsV2 " + describe(prefix) +
                                       ": a truncated page without a new continuation token");
    token = std::move(r.next_continuation_token);
  }
  return Error(ErrorCode::kIo, "ListObjectsV2 " + describe(prefix) + ": too many pages");
}

Result<std::string> S3Store::put(std::string_view key, std::string_view data,
                                 PutCondition condition) {
  const std::string object = object_key(key);
  s3::CallInfo info;
  const bool if_absent = condition.kind == PutCondition::Kind::kIfAbsent;
  std::optional<std::string> if_match;
  if (condition.kind == PutCondition::Kind::kIfMatch) {
    if (condition.etag.empty())
      return Error(ErrorCode::kFenced, "'" + describe(key) + "': no ETag to compare with");
    if_match = condition.etag;
  }
  auto etag = client_.put_object(location_.bucket, object, as_bytes(data), if_absent, if_match,
                                 /*sign_body=*/true, &info);
  const bool lost = !etag.ok() && (etag.error().code() == ErrorCode::kExists ||
                                   etag.error().code() == ErrorCode::kFenced);
  if (lost && info.attempts > 1) {
    // Retried: the first try may have been the one that wrote it.
    auto now = read_versioned(key, data.size() + 1);
    if (now.ok() && now->data == data) return std::move(now->etag);
  }
  if (!etag.ok() && etag.error().code() == ErrorCode::kExists)
    return Error(ErrorCode::kExists, "'" + describe(key) + "' exists already (" +
                                         etag.error().message() + ")");
  return etag;
}

Result<std::unique_ptr<Upload>> S3Store::begin_upload(std::string_view key,
                                                      const UploadOptions& options) {
  std::string upload_id;
  if (options.size > options.part_bytes) {
    if (options.part_bytes < s3::kMinPartSize)
      return Error(ErrorCode::kInvalid, "'" + describe(key) + "': parts of " +
                                            std::to_string(options.part_bytes) +
                                            " bytes are under S3's 5 MiB");
    SG_ASSIGN_OR_RETURN(upload_id, client_.create_multipart(location_.bucket, object_key(key)));
  }
  return std::unique_ptr<Upload>(std::make_unique<S3Upload>(
      client_, location_.bucket, object_key(key), options, std::move(upload_id)));
}

Status S3Store::remove(std::string_view key) {
  const std::string object = object_key(key);
  return client_.delete_objects(std::span(&object, 1), location_.bucket);
}

Status S3Store::remove_many(std::span<const std::string> keys) {
  std::vector<std::string> objects;
  for (size_t at = 0; at < keys.size(); at += s3::kMaxDeleteKeys) {
    objects.clear();
    for (size_t i = at; i < std::min(keys.size(), at + s3::kMaxDeleteKeys); ++i)
      objects.push_back(object_key(keys[i]));
    SG_RETURN_IF_ERROR(client_.delete_objects(objects, location_.bucket));
  }
  return {};
}

Result<size_t> S3Store::abort_uploads(std::string_view prefix) {
  size_t aborted = 0;
  std::string key_marker, id_marker;
  const std::string p = object_key(prefix);
  for (int page = 0; page < 100'000; ++page) {
    SG_ASSIGN_OR_RETURN(auto r, client_.list_uploads(location_.bucket, p, key_marker, id_marker));
    for (const auto& u : r.uploads) {
      SG_RETURN_IF_ERROR(client_.abort_multipart(location_.bucket, u.key, u.upload_id));
      ++aborted;
    }
    if (!r.is_truncated) return aborted;
    if (r.next_key_marker == key_marker && r.next_upload_id_marker == id_marker)
      return Error(ErrorCode::kIo, "ListMultipartUploads " + describe(prefix) +
                                       ": a truncated page without new markers");
    key_marker = r.next_key_marker;
    id_marker = r.next_upload_id_marker;
  }
  return aborted;
}

}  // namespace shardguard::storage
