// The HTTP seam of object storage: one blocking request at a time per caller, any number of
// callers at once. Production uses libcurl (storage/curl_transport.h: one multi handle,
// connections reused across requests and threads); tests use fakes or the real transport
// against a loopback server. Bodies move without copies: a request body is a span the caller
// keeps valid, and a response body may go straight into caller memory (`sink`, e.g. a ranged
// GET into a tensor's destination).
//
// Errors: a transport failure (connect refused, reset, timeout, stall, TLS) is an Error
// (kTimeout for timeouts and stalls, kIo otherwise) naming the method and the URL without its
// query string (which may hold signatures); any HTTP status is a response, not an error.
// Thread-safety: HttpTransport::perform() may be called from any number of threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/result.h"

namespace shardguard::storage {

// Asked while a transfer runs (every ~100 ms, on the transport's thread: must be thread-safe)
// and before each retry: a reason stops the request with kCancelled naming it (a save that
// was abandoned, or whose deadline passed).
using Interrupt = std::function<std::optional<std::string>()>;

struct HttpHeader {
  std::string name;
  std::string value;
};

struct HttpRequest {
  std::string method = "GET";  // GET, PUT, POST, HEAD, DELETE
  // Absolute and already encoded: scheme://host[:port]/path[?query].
  std::string url;
  std::vector<HttpHeader> headers;
  // The request body; must stay valid until perform() returns. Sent with Content-Length.
  std::span<const std::byte> body;
  // When set, a 2xx response's body is written here (more bytes than it holds is an error,
  // kIo); otherwise it is collected into HttpResponse::body, up to max_body bytes (more: kIo).
  // Any other status's body goes to HttpResponse::body, its first 64 KiB (an error document).
  std::optional<std::span<std::byte>> sink;
  uint64_t max_body = 16ull << 20;
  // Whole request, connect included; zero: no limit.
  Duration timeout{};
  Duration connect_timeout = std::chrono::seconds(10);
  // A transfer moving fewer than low_speed_bytes a second for low_speed_time (both set), while
  // no other transfer of the same transport moves that much either, is cut off with kTimeout:
  // a stalled upload or download, or a server the network cut off, however long its overall
  // timeout. (One that waits while the server serves others is bounded by `timeout`.)
  uint64_t low_speed_bytes = 0;
  Duration low_speed_time{};
  Interrupt interrupt{};  // empty: never interrupted
};

struct HttpResponse {
  int status = 0;
  std::vector<HttpHeader> headers;  // names lower-cased, in the order received
  std::string body;                 // when the request had no sink
  uint64_t sink_bytes = 0;          // bytes written into the request's sink

  // The first header of that (lower-case) name.
  std::optional<std::string> header(std::string_view lower_name) const;
};

// In the message of the kTimeout a stalled transfer (the low-speed limit) fails with.
inline constexpr std::string_view kTransferStalled = "the transfer stalled";
// In the message of the kTimeout of a connection not made within connect_timeout (a server
// cut off by the network: every retry would wait as long again).
inline constexpr std::string_view kNoConnection = "no connection within the connect timeout";

class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  // Performs one request and returns once it is done or failed. Thread-safe.
  virtual Result<HttpResponse> perform(const HttpRequest& request) = 0;
};

// "GET http://host:port/path" (query dropped) for messages.
std::string describe_request(std::string_view method, std::string_view url);

}  // namespace shardguard::storage
