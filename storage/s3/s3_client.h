// The S3 API calls shardguard makes, each one request with its retries: PutObject (plain,
// If-None-Match: *, If-Match), GetObject (whole or a byte range, into caller memory),
// HeadObject, ListObjectsV2, the multipart calls, ListMultipartUploads, DeleteObjects and
// HeadBucket. Requests are signed with SigV4 (storage/s3/sigv4.h; small bodies hashed, part
// bodies sent UNSIGNED-PAYLOAD: their bytes are covered by the manifest's block checksums,
// checked on every read) with credentials from a CredentialsProvider.
//
// Retries: transport errors (resets, timeouts), 500, 502, 503 (SlowDown), 504, 400
// RequestTimeout, and 409 ConditionalRequestConflict are retried up to `retries` times with
// exponential backoff (100 ms doubling, at most 5 s) and full jitter; a stalled transfer (less
// than stall_bytes_per_second for stall_time) only once, so that one rank's stuck upload fails
// its save within seconds instead of after every retry. An Interrupt (storage/http.h) given
// to a call stops it, and its retries, with kCancelled naming the reason. Every other answer is an
// Error that names the call, the object (s3://bucket/key) and the server's code and message,
// never a signature, a query string or a secret:
//   404 NoSuchKey/NoSuchUpload -> kNotFound; 404 NoSuchBucket -> kNotFound naming the bucket;
//   412 -> kExists (If-None-Match) or kFenced (If-Match); 403 -> kInvalid "refused", naming
//   the credentials' source; 400 RequestTimeTooSkewed -> kInvalid saying the clocks differ.
// Thread-safety: every method may be called from any number of threads at once.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/result.h"
#include "storage/http.h"
#include "storage/s3/credentials.h"
#include "storage/s3/s3_options.h"
#include "storage/s3/s3_xml.h"

namespace shardguard::storage::s3 {

struct ClientDeps {
  HttpTransport& http;
  CredentialsProvider& credentials;
  Clock& clock;
  // How backoff passes time (tests: a fake); default std::this_thread::sleep_for.
  std::function<void(Duration)> sleep;
  // Jitter in [0, 1); default a thread-local Mersenne twister.
  std::function<double()> random;
};

struct ObjectHead {
  uint64_t size = 0;
  std::string etag;  // without quotes
  std::optional<Duration> age;  // the server's Date minus Last-Modified
};

struct GetResult {
  std::string body;        // without a sink
  uint64_t bytes = 0;      // bytes received (into the sink, or body.size())
  uint64_t object_size = 0;  // from Content-Range or Content-Length
  std::string etag;
  std::optional<Duration> age;
};

// What the retries saw, for the caller's accounting (a conditional write that was retried
// may have succeeded the first time).
struct CallInfo {
  int attempts = 0;
};

class S3Client {
 public:
  // `options` resolved (resolve_s3_options); kInvalid for a bad endpoint.
  static Result<std::unique_ptr<S3Client>> create(ClientDeps deps, S3Options options);
  ~S3Client();

  const S3Options& options() const;
  // "s3://bucket/key" for messages.
  static std::string url_of(std::string_view bucket, std::string_view key);

  // PutObject. `if_none_match`: If-None-Match: *; `if_match`: the unquoted ETag (what RGW
  // takes). Returns the new ETag (unquoted, may be empty). `sign_body`: hash the body into
  // the signature (small records); otherwise UNSIGNED-PAYLOAD.
  Result<std::string> put_object(std::string_view bucket, std::string_view key,
                                 std::span<const std::byte> body, bool if_none_match = false,
                                 std::optional<std::string> if_match = std::nullopt,
                                 bool sign_body = true, CallInfo* info = nullptr,
                                 const Interrupt& interrupt = {});
  // GetObject of [offset, offset + length) (the whole object when length is nullopt), into
  // `sink` when given (exactly the bytes asked for; fewer only at the end of the object).
  Result<GetResult> get_object(std::string_view bucket, std::string_view key,
                               std::optional<std::pair<uint64_t, uint64_t>> range = std::nullopt,
                               std::optional<std::span<std::byte>> sink = std::nullopt,
                               uint64_t max_body = 256ull << 20);
  // HeadObject; nullopt when there is no such key.
  Result<std::optional<ObjectHead>> head_object(std::string_view bucket, std::string_view key);
  // One page of ListObjectsV2 (encoding-type=url; keys come back decoded).
  Result<ListObjectsResult> list_objects(std::string_view bucket, std::string_view prefix,
                                         std::string_view delimiter,
                                         std::string_view continuation_token = "");
  Result<std::string> create_multipart(std::string_view bucket, std::string_view key);
  // Returns the part's ETag.
  Result<std::string> upload_part(std::string_view bucket, std::string_view key,
                                  std::string_view upload_id, uint32_t part_number,
                                  std::span<const std::byte> body, const Interrupt& interrupt = {});
  // Returns the object's ETag (may be empty: RGW 16). A retry that finds the upload gone
  // (the first try completed it) is success when the object has `expected_size`.
  Result<std::string> complete_multipart(std::string_view bucket, std::string_view key,
                                         std::string_view upload_id,
                                         std::span<const CompletedPart> parts,
                                         uint64_t expected_size, const Interrupt& interrupt = {});
  Status abort_multipart(std::string_view bucket, std::string_view key,
                         std::string_view upload_id);
  Result<ListUploadsResult> list_uploads(std::string_view bucket, std::string_view prefix,
                                         std::string_view key_marker = "",
                                         std::string_view upload_id_marker = "");
  // DeleteObjects of at most 1,000 keys (Content-MD5 as S3 requires); a key the server could
  // not delete is an error naming it.
  Status delete_objects(std::span<const std::string> keys, std::string_view bucket);
  // HeadBucket: kNotFound naming the bucket when it does not exist.
  Status head_bucket(std::string_view bucket);

  struct Impl;

 private:
  explicit S3Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::storage::s3
