// The XML of the S3 API: reading every answer the S3 client gets (ListObjectsV2, multipart
// uploads, DeleteObjects, error documents) and writing the two request bodies it sends
// (CompleteMultipartUpload, DeleteObjects). Answers come from a server we do not trust, so the
// readers are strict and bounded:
//
//   refused (kCorrupt, the message names the call and what):
//     more than kMaxAnswerBytes, elements nested deeper than kMaxDepth, any DOCTYPE (so no
//     DTD and no entity can be declared; expat's billion-laughs guard is on as well), XML that
//     is not well-formed, a root other than the call's, a number that does not parse or
//     overflows, a boolean other than true/false, more than kMaxEntries entries, a field given
//     twice in one record, a record without its key, a bad %-escape in a url-encoded key, a
//     decoded key with NUL or invalid UTF-8, a truncated page without the marker of the next.
//   accepted: unknown elements anywhere (servers add fields), the S3 namespace or none (names
//     are compared without any prefix), empty values such as RGW's <ETag></ETag>.
//   an <Error> document as the answer to any call (S3 sends one with status 200 when
//     CompleteMultipartUpload fails late): kIo naming its Code and Message, never success.
//
// Elements are matched by their place under the root (ListBucketResult/Contents/Key), as the S3
// API reference and Ceph RGW 16 (src/rgw/rgw_rest_s3.cc) write them.
// Thread-safety: pure functions of their arguments; call from any number of threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace shardguard::storage::s3 {

// Largest answer read; callers may stop reading a body at this size.
inline constexpr size_t kMaxAnswerBytes = size_t{64} << 20;
// Deepest element nesting accepted (S3 answers go 4 deep: ...Result/Upload/Owner/ID).
inline constexpr int kMaxDepth = 16;
// Most entries in one answer (objects plus prefixes, uploads, or deleted plus failed keys); S3
// pages hold at most 1,000.
inline constexpr size_t kMaxEntries = 100'000;
// S3's own limits on the request bodies.
inline constexpr size_t kMaxDeleteKeys = 1000;
inline constexpr uint32_t kMaxPartNumber = 10'000;

// <Error><Code>NoSuchKey</Code><Message>..</Message><Resource>..</Resource><RequestId>..
struct ErrorBody {
  std::string code, message, resource, request_id;
};

struct ListedObject {
  std::string key;  // decoded when the answer is url-encoded
  uint64_t size = 0;
  std::string etag;  // without its quotes
  std::string last_modified;
};

struct ListObjectsResult {
  std::vector<ListedObject> contents;
  std::vector<std::string> common_prefixes;  // as sent, with the delimiter at the end
  bool is_truncated = false;
  std::string next_continuation_token;  // opaque: sent back as given, never decoded
};

struct MultipartUpload {
  std::string key, upload_id, initiated;
};

struct ListUploadsResult {
  std::vector<MultipartUpload> uploads;
  bool is_truncated = false;
  std::string next_key_marker, next_upload_id_marker;
};

struct DeleteResult {
  struct Failure {
    std::string key, code, message;
  };
  std::vector<std::string> deleted;
  std::vector<Failure> errors;
};

struct CompleteResult {
  std::string etag;  // without its quotes; may be empty (RGW 16 sends <ETag></ETag>)
};

struct CompletedPart {
  uint32_t number = 0;
  std::string etag;  // with or without its quotes; sent quoted
};

// An S3 error document (the body of a non-2xx answer). Missing fields are empty; a document
// that is not <Error> is kCorrupt.
Result<ErrorBody> parse_error(std::string_view xml);

// A ListObjectsV2 page. `url_encoded_keys`: the request carried encoding-type=url; an answer
// with keys must then say <EncodingType>url</EncodingType> (AWS and RGW do), since keys that
// may or may not be encoded cannot be read safely. Keys and common prefixes are decoded when it
// does. Every <Contents> needs <Key> and <Size>; IsTruncated=true needs NextContinuationToken.
Result<ListObjectsResult> parse_list_objects_v2(std::string_view xml, bool url_encoded_keys);

// The UploadId of an InitiateMultipartUploadResult (never empty).
Result<std::string> parse_initiate_multipart(std::string_view xml);

// A CompleteMultipartUploadResult. An <Error> document (sent with status 200) is kIo naming
// the S3 code and message: the object was not written.
Result<CompleteResult> parse_complete_multipart(std::string_view xml);

// A ListMultipartUploadsResult page. Upload keys are decoded when `url_encoded_keys` (RGW 16
// encodes them without saying so) or when the answer says <EncodingType>url</EncodingType>;
// NextKeyMarker only when the answer says so (AWS encodes it, RGW sends it raw).
Result<ListUploadsResult> parse_list_multipart_uploads(std::string_view xml, bool url_encoded_keys);

// A DeleteObjects answer: the keys deleted (none when the request was quiet) and those not.
Result<DeleteResult> parse_delete_result(std::string_view xml);

// The body of CompleteMultipartUpload. kInvalid when `parts` is empty, a number lies outside
// 1..kMaxPartNumber or is not above the one before, or an ETag is empty or not valid XML text.
Result<std::string> complete_multipart_body(std::span<const CompletedPart> parts);

// The body of DeleteObjects for 1..kMaxDeleteKeys keys, XML-escaped. kInvalid for an empty
// key, invalid UTF-8, or a control character XML 1.0 cannot carry (tab, CR, LF are escaped).
Result<std::string> delete_objects_body(std::span<const std::string> keys, bool quiet);

// Decodes a key S3 sent under encoding-type=url: %XX escapes and '+' as a space (a literal
// '+' arrives as %2B). kCorrupt for a bad %-escape, a NUL, or bytes that are not UTF-8.
Result<std::string> url_decode(std::string_view encoded);

}  // namespace shardguard::storage::s3
