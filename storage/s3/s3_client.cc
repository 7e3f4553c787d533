#include "storage/s3/s3_client.h"

#include <openssl/evp.h>

#include <algorithm>
#include <random>
#include <thread>

#include "core/time_formats.h"
#include "storage/s3/sigv4.h"

namespace shardguard::storage::s3 {
namespace {

using Query = std::vector<std::pair<std::string, std::string>>;

constexpr Duration kBackoffBase = std::chrono::milliseconds(100);
constexpr Duration kBackoffMax = std::chrono::seconds(5);

std::string unquote(std::string s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') return s.substr(1, s.size() - 2);
  return s;
}

std::string base64(std::span<const unsigned char> bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), bytes.data(),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(std::max(n, 0)));
  return out;
}

// Content-MD5 of a body (DeleteObjects requires it).
std::string content_md5(std::string_view body) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(body.data(), body.size(), digest, &len, EVP_md5(), nullptr);
  return base64({digest, len});
}

std::span<const std::byte> as_bytes(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

double default_random() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

// One call as the retry loop sees it.
struct Call {
  std::string name;  // "PutObject", for messages
  std::string method;
  std::string bucket;
  std::string key;  // "" for bucket-level calls
  Query query;
  std::vector<HttpHeader> headers;  // besides Host and the signature's own
  std::span<const std::byte> body;
  bool sign_body = true;
  std::optional<std::span<std::byte>> sink;
  uint64_t max_body = 16ull << 20;
  // Statuses that are answers, not errors (the caller reads them).
  std::vector<int> accepted = {200};
  bool conditional = false;  // a 409 ConditionalRequestConflict is retried
  Interrupt interrupt;
};

bool retryable_status(int status, const ErrorBody& body, bool conditional) {
  if (status == 500 || status == 502 || status == 503 || status == 504) return true;
  if (status == 400 && body.code == "RequestTimeout") return true;
  if (status == 409 && (conditional || body.code == "ConditionalRequestConflict")) return true;
  return false;
}

}  // namespace

struct S3Client::Impl {
  ClientDeps deps;
  S3Options options;
  Endpoint endpoint;

  Impl(ClientDeps d, S3Options o, Endpoint e)
      : deps(std::move(d)), options(std::move(o)), endpoint(std::move(e)) {
    if (!deps.sleep) deps.sleep = [](Duration d) { std::this_thread::sleep_for(d); };
    if (!deps.random) deps.random = default_random;
  }

  std::string target(const Call& c) const { return url_of(c.bucket, c.key); }

  // The URL, Host header and the path and query as signed.
  struct Address {
    std::string url, host, path, query;
  };
  Address address(const Call& c) const {
    Address a;
    const bool path_style = use_path_style(options, endpoint, c.bucket);
    const std::string encoded_key = uri_encode(c.key, /*keep_slash=*/true);
    if (path_style) {
      a.host = endpoint.authority();
      a.path = "/" + c.bucket + (c.key.empty() ? std::string() : "/" + encoded_key);
    } else {
      Endpoint v = endpoint;
      v.host = c.bucket + "." + endpoint.host;
      a.host = v.authority();
      a.path = "/" + encoded_key;
    }
    Query q = c.query;
    std::sort(q.begin(), q.end());
    for (const auto& [name, value] : q) {
      if (!a.query.empty()) a.query += '&';
      a.query += uri_encode(name, false) + "=" + uri_encode(value, false);
    }
    a.url = std::string(endpoint.https ? "https://" : "http://") + a.host + a.path;
    if (!a.query.empty()) a.url += "?" + a.query;
    return a;
  }

  Error answer_error(const Call& c, const HttpResponse& r, int attempts) const {
    ErrorBody body;
    if (auto parsed = parse_error(r.body); parsed.ok()) body = std::move(*parsed);
    std::string text = c.name + " " + target(c) + ": " + std::to_string(r.status);
    if (!body.code.empty()) text += " " + body.code;
    if (!body.message.empty()) text += ": " + body.message;
    if (attempts > 1) text += " (after " + std::to_string(attempts) + " tries)";
    ErrorCode code = ErrorCode::kIo;
    if (r.status == 404) {
      code = ErrorCode::kNotFound;
      if (body.code == "NoSuchBucket")
        text = c.name + " " + target(c) + ": bucket '" + c.bucket + "' does not exist at " +
               options.endpoint + " (404 NoSuchBucket)";
    } else if (r.status == 412) {
      code = ErrorCode::kExists;
    } else if (r.status == 403) {
      code = ErrorCode::kInvalid;  // the keys or the policy: not a passing trouble
      text += " (refused; credentials from " + deps.credentials.source() + ")";
    } else if (body.code == "RequestTimeTooSkewed") {
      code = ErrorCode::kInvalid;
      text += " (this machine's clock and the server's differ by more than S3 allows: "
              "check NTP)";
    }
    return Error(code, text);
  }

  Result<HttpResponse> call(const Call& c, CallInfo* info = nullptr) {
    const Address a = address(c);
    std::string payload_hash =
        c.sign_body ? sha256_hex(c.body) : std::string(kUnsignedPayload);
    Duration backoff = kBackoffBase;
    std::optional<Error> last;
    int stalls = 0;
    auto interrupted = [&]() -> std::optional<Error> {
      if (!c.interrupt) return std::nullopt;
      if (auto why = c.interrupt()) return Error(ErrorCode::kCancelled, c.name + " " + target(c) + ": " + *why);
      return std::nullopt;
    };
    for (int attempt = 1; attempt <= options.retries + 1; ++attempt) {
      if (auto stop = interrupted()) return std::move(*stop);
      if (info != nullptr) info->attempts = attempt;
      SG_ASSIGN_OR_RETURN(Credentials creds, deps.credentials.get());
      HttpRequest req;
      req.method = c.method;
      req.url = a.url;
      req.headers = c.headers;
      req.headers.push_back({"Host", a.host});
      if (!c.body.empty() || c.method == "PUT" || c.method == "POST")
        req.headers.push_back({"Content-Length", std::to_string(c.body.size())});
      sign_request(c.method, a.path, a.query, req.headers, payload_hash, creds, options.region,
                   deps.clock.wall_now());
      req.body = c.body;
      req.sink = c.sink;
      req.max_body = c.max_body;
      req.timeout = options.request_timeout;
      req.low_speed_bytes = options.stall_bytes_per_second;
      req.low_speed_time = options.stall_time;
      req.interrupt = c.interrupt;
      auto r = deps.http.perform(req);
      if (r.ok()) {
        if (std::find(c.accepted.begin(), c.accepted.end(), r->status) != c.accepted.end())
          return std::move(*r);
        ErrorBody body;
        if (auto parsed = parse_error(r->body); parsed.ok()) body = std::move(*parsed);
        if (!retryable_status(r->status, body, c.conditional))
          return answer_error(c, *r, attempt);
        last = answer_error(c, *r, attempt);
      } else {
        if (r.error().code() == ErrorCode::kCancelled) return std::move(r).error();
        last = Error(r.error().code(), c.name + " " + target(c) + ": " + r.error().message() +
                                           " (after " + std::to_string(attempt) + " tries)");
        // A stall (curl's low-speed limit) or a connection not made in time is retried once:
        // a stuck upload, or a server the network cut off, must fail the save fast.
        const std::string& m = r.error().message();
        const bool stalled = m.find(kTransferStalled) != std::string::npos ||
                             m.find(kNoConnection) != std::string::npos;
        if (stalled && ++stalls > 1) return std::move(*last);
      }
      if (attempt <= options.retries) {
        // The backoff in slices, so that an interrupt is heard within 100 ms.
        Duration left = std::chrono::duration_cast<Duration>(backoff * deps.random());
        while (left > Duration::zero()) {
          if (auto stop = interrupted()) return std::move(*stop);
          const Duration slice = std::min<Duration>(left, std::chrono::milliseconds(100));
          deps.sleep(slice);
          left -= slice;
        }
        backoff = std::min(backoff * 2, kBackoffMax);
      }
    }
    return std::move(*last);
  }

  std::optional<Duration> age_of(const HttpResponse& r) const {
    auto date = r.header("date");
    auto modified = r.header("last-modified");
    if (!date || !modified) return std::nullopt;
    auto d = parse_http_date(*date);
    auto m = parse_http_date(*modified);
    if (!d.ok() || !m.ok()) return std::nullopt;
    return std::max<Duration>(Duration::zero(), *d - *m);
  }
};

S3Client::S3Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
S3Client::~S3Client() = default;

Result<std::unique_ptr<S3Client>> S3Client::create(ClientDeps deps, S3Options options) {
  SG_ASSIGN_OR_RETURN(Endpoint endpoint, parse_endpoint(options.endpoint));
  return std::unique_ptr<S3Client>(
      new S3Client(std::make_unique<Impl>(std::move(deps), std::move(options), endpoint)));
}

const S3Options& S3Client::options() const { return impl_->options; }

std::string S3Client::url_of(std::string_view bucket, std::string_view key) {
  std::string out = "s3://" + std::string(bucket);
  if (!key.empty()) out += "/" + std::string(key);
  return out;
}

Result<std::string> S3Client::put_object(std::string_view bucket, std::string_view key,
                                         std::span<const std::byte> body, bool if_none_match,
                                         std::optional<std::string> if_match, bool sign_body,
                                         CallInfo* info, const Interrupt& interrupt) {
  Call c;
  c.name = "PutObject";
  c.interrupt = interrupt;
  c.method = "PUT";
  c.bucket = bucket;
  c.key = key;
  c.body = body;
  c.sign_body = sign_body;
  c.headers.push_back({"Content-Type", "application/octet-stream"});
  if (if_none_match) c.headers.push_back({"If-None-Match", "*"});
  // RGW 16 matches only the unquoted ETag (AWS takes both).
  if (if_match) c.headers.push_back({"If-Match", unquote(*if_match)});
  c.conditional = if_none_match || if_match.has_value();
  auto r = impl_->call(c, info);
  if (!r.ok()) {
    if (r.error().code() == ErrorCode::kExists && if_match)
      return Error(ErrorCode::kFenced, r.error().message());
    return std::move(r).error();
  }
  return unquote(r->header("etag").value_or(""));
}

Result<GetResult> S3Client::get_object(std::string_view bucket, std::string_view key,
                                       std::optional<std::pair<uint64_t, uint64_t>> range,
                                       std::optional<std::span<std::byte>> sink,
                                       uint64_t max_body) {
  Call c;
  c.name = "GetObject";
  c.method = "GET";
  c.bucket = bucket;
  c.key = key;
  c.sink = sink;
  c.max_body = max_body;
  c.accepted = {200, 206};
  if (range) {
    c.accepted.push_back(416);  // the range starts past the end: nothing there
    if (range->second == 0) {
      GetResult empty;
      return empty;
    }
    c.headers.push_back({"Range", "bytes=" + std::to_string(range->first) + "-" +
                                      std::to_string(range->first + range->second - 1)});
  }
  SG_ASSIGN_OR_RETURN(auto r, impl_->call(c));
  GetResult out;
  if (r.status == 416) return out;
  out.bytes = sink ? r.sink_bytes : r.body.size();
  out.body = std::move(r.body);
  out.etag = unquote(r.header("etag").value_or(""));
  out.age = impl_->age_of(r);
  if (auto cr = r.header("content-range")) {
    const auto slash = cr->rfind('/');
    if (slash != std::string::npos) out.object_size = std::strtoull(cr->c_str() + slash + 1, nullptr, 10);
  } else {
    out.object_size = out.bytes;
  }
  return out;
}

Result<std::optional<ObjectHead>> S3Client::head_object(std::string_view bucket,
                                                        std::string_view key) {
  Call c;
  c.name = "HeadObject";
  c.method = "HEAD";
  c.bucket = bucket;
  c.key = key;
  c.accepted = {200, 404};
  SG_ASSIGN_OR_RETURN(HttpResponse r, impl_->call(c));
  if (r.status == 404) return std::optional<ObjectHead>();
  ObjectHead h;
  h.size = std::strtoull(r.header("content-length").value_or("0").c_str(), nullptr, 10);
  h.etag = unquote(r.header("etag").value_or(""));
  h.age = impl_->age_of(r);
  return std::optional<ObjectHead>(std::move(h));
}

Result<ListObjectsResult> S3Client::list_objects(std::string_view bucket, std::string_view prefix,
                                                 std::string_view delimiter,
                                                 std::string_view continuation_token) {
  Call c;
  c.name = "ListObjectsV2";
  c.method = "GET";
  c.bucket = bucket;
  c.query = {{"list-type", "2"}, {"encoding-type", "url"}, {"prefix", std::string(prefix)}};
  if (!delimiter.empty()) c.query.push_back({"delimiter", std::string(delimiter)});
  if (!continuation_token.empty())
    c.query.push_back({"continuation-token", std::string(continuation_token)});
  SG_ASSIGN_OR_RETURN(HttpResponse r, impl_->call(c));
  auto parsed = parse_list_objects_v2(r.body, /*url_encoded_keys=*/true);
  if (!parsed.ok()) return std::move(parsed).error().context("ListObjectsV2 " + url_of(bucket, prefix));
  return parsed;
}

Result<std::string> S3Client::create_multipart(std::string_view bucket, std::string_view key) {
  Call c;
  c.name = "CreateMultipartUpload";
  c.method = "POST";
  c.bucket = bucket;
  c.key = key;
  c.query = {{"uploads", ""}};
  c.headers.push_back({"Content-Type", "application/octet-stream"});
  SG_ASSIGN_OR_RETURN(HttpResponse r, impl_->call(c));
  auto id = parse_initiate_multipart(r.body);
  if (!id.ok()) return std::move(id).error().context("CreateMultipartUpload " + url_of(bucket, key));
  if (id->empty())
    return Error(ErrorCode::kIo,
                 "CreateMultipartUpload " + url_of(bucket, key) + ": the answer has no UploadId");
  return id;
}

Result<std::string> S3Client::upload_part(std::string_view bucket, std::string_view key,
                                          std::string_view upload_id, uint32_t part_number,
                                          std::span<const std::byte> body,
                                          const Interrupt& interrupt) {
  // RGW reads "?partNumber=1&uploadId=" (an empty id) as a plain PUT of the whole object.
  if (upload_id.empty())
    return Error(ErrorCode::kInternal, "UploadPart " + url_of(bucket, key) + ": no upload id");
  Call c;
  c.name = "UploadPart " + std::to_string(part_number) + " of";
  c.method = "PUT";
  c.bucket = bucket;
  c.key = key;
  c.query = {{"partNumber", std::to_string(part_number)}, {"uploadId", std::string(upload_id)}};
  c.body = body;
  c.sign_body = false;
  c.interrupt = interrupt;
  SG_ASSIGN_OR_RETURN(HttpResponse r, impl_->call(c));
  auto etag = r.header("etag");
  if (!etag || etag->empty())
    return Error(ErrorCode::kIo, "UploadPart " + std::to_string(part_number) + " of " +
                                     url_of(bucket, key) + ": the answer has no ETag");
  return unquote(*etag);
}

Result<std::string> S3Client::complete_multipart(std::string_view bucket, std::string_view key,
                                                 std::string_view upload_id,
                                                 std::span<const CompletedPart> parts,
                                                 uint64_t expected_size,
                                                 const Interrupt& interrupt) {
  SG_ASSIGN_OR_RETURN(std::string xml, complete_multipart_body(parts));
  Call c;
  c.name = "CompleteMultipartUpload";
  c.method = "POST";
  c.bucket = bucket;
  c.key = key;
  c.query = {{"uploadId", std::string(upload_id)}};
  c.body = as_bytes(xml);
  c.headers.push_back({"Content-Type", "application/xml"});
  c.interrupt = interrupt;
  CallInfo info;
  auto r = impl_->call(c, &info);
  if (!r.ok()) {
    // Retried after the first try completed it: the upload is gone and the object is there.
    if (r.error().code() == ErrorCode::kNotFound && info.attempts > 1) {
      auto head = head_object(bucket, key);
      if (head.ok() && *head && (*head)->size == expected_size) return (*head)->etag;
    }
    return std::move(r).error();
  }
  // A 200 may carry an <Error> document: parse_complete_multipart makes it an error.
  auto done = parse_complete_multipart(r->body);
  if (!done.ok())
    return std::move(done).error().context("CompleteMultipartUpload " + url_of(bucket, key));
  return done->etag;
}

Status S3Client::abort_multipart(std::string_view bucket, std::string_view key,
                                 std::string_view upload_id) {
  if (upload_id.empty()) return {};
  Call c;
  c.name = "AbortMultipartUpload";
  c.method = "DELETE";
  c.bucket = bucket;
  c.key = key;
  c.query = {{"uploadId", std::string(upload_id)}};
  c.accepted = {200, 204, 404};
  SG_RETURN_IF_ERROR(impl_->call(c));
  return {};
}

Result<ListUploadsResult> S3Client::list_uploads(std::string_view bucket, std::string_view prefix,
                                                 std::string_view key_marker,
                                                 std::string_view upload_id_marker) {
  Call c;
  c.name = "ListMultipartUploads";
  c.method = "GET";
  c.bucket = bucket;
  c.query = {{"uploads", ""}, {"encoding-type", "url"}, {"prefix", std::string(prefix)}};
  if (!key_marker.empty()) c.query.push_back({"key-marker", std::string(key_marker)});
  if (!upload_id_marker.empty())
    c.query.push_back({"upload-id-marker", std::string(upload_id_marker)});
  SG_ASSIGN_OR_RETURN(HttpResponse r, impl_->call(c));
  auto parsed = parse_list_multipart_uploads(r.body, /*url_encoded_keys=*/true);
  if (!parsed.ok())
    return std::move(parsed).error().context("ListMultipartUploads " + url_of(bucket, prefix));
  return parsed;
}

Status S3Client::delete_objects(std::span<const std::string> keys, std::string_view bucket) {
  if (keys.empty()) return {};
  SG_ASSIGN_OR_RETURN(std::string xml, delete_objects_body(keys, /*quiet=*/true));
  Call c;
  c.name = "DeleteObjects";
  c.method = "POST";
  c.bucket = bucket;
  c.query = {{"delete", ""}};
  c.body = as_bytes(xml);
  c.headers.push_back({"Content-Type", "application/xml"});
  c.headers.push_back({"Content-MD5", content_md5(xml)});
  SG_ASSIGN_OR_RETURN(HttpResponse r, impl_->call(c));
  auto result = parse_delete_result(r.body);
  if (!result.ok()) return std::move(result).error().context("DeleteObjects " + url_of(bucket, ""));
  for (const auto& f : result->errors)
    if (f.code != "NoSuchKey")
      return Error(ErrorCode::kIo, "DeleteObjects: " + url_of(bucket, f.key) + ": " + f.code +
                                       (f.message.empty() ? "" : ": " + f.message));
  return {};
}

Status S3Client::head_bucket(std::string_view bucket) {
  Call c;
  c.name = "HeadBucket";
  c.method = "HEAD";
  c.bucket = bucket;
  auto r = impl_->call(c);
  if (!r.ok() && r.error().code() == ErrorCode::kNotFound)
    return Error(ErrorCode::kNotFound, "bucket '" + std::string(bucket) + "' does not exist at " +
                                           impl_->options.endpoint);
  if (!r.ok()) return std::move(r).error();
  return {};
}

}  // namespace shardguard::storage::s3
