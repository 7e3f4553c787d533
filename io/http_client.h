// HTTP/1.1 client seam for the metadata endpoints that announce preemption (AWS IMDS, GCP
// metadata, Azure Scheduled Events) and for user hooks that POST on events. Plain http://
// only: these endpoints are link-local. Components take an HttpClient&; production passes a
// BeastHttpClient, tests a fake.
//
// Thread-safety: request() must be called on the loop thread (or before the loop runs);
// `done` always runs on the loop thread, exactly once, never inside request() itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/result.h"

namespace shardguard::io {

class EventLoop;

// Header fields in order; lookups ignore ASCII case, as HTTP field names do.
class HttpHeaders {
 public:
  HttpHeaders() = default;
  HttpHeaders(std::initializer_list<std::pair<std::string, std::string>> fields);

  // Appends a field (repeated names are kept).
  void add(std::string name, std::string value);
  // Replaces every field named `name` with one.
  void set(std::string name, std::string value);
  // The first value of `name`, if present.
  std::optional<std::string> get(std::string_view name) const;
  bool contains(std::string_view name) const { return get(name).has_value(); }

  const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }
  size_t size() const { return fields_.size(); }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

struct HttpRequest {
  std::string method = "GET";
  std::string url;  // http://host[:port][/path][?query]
  HttpHeaders headers;
  std::string body;
  // Deadline for the whole exchange: resolve, connect, write and read.
  Duration timeout = std::chrono::seconds(10);
  // A larger response body fails the request.
  size_t max_body_bytes = 8 * 1024 * 1024;
};

struct HttpResponse {
  int status = 0;
  HttpHeaders headers;
  std::string body;
};

struct ParsedUrl {
  std::string host;
  uint16_t port = 80;
  std::string target = "/";  // path and query, as sent on the request line
};

// Splits an http:// URL. Errors (kInvalid) name the URL: other schemes, a missing host,
// a bad port, userinfo, or whitespace.
Result<ParsedUrl> parse_url(std::string_view url);

class HttpClient {
 public:
  using Callback = std::function<void(Result<HttpResponse>)>;
  virtual ~HttpClient() = default;
  // Starts the request; `done` gets the response (any status) or an error naming the
  // method, URL and cause: "GET http://127.0.0.1:1234/x: timed out after 200ms" (kTimeout),
  // "...: Connection refused" (kIo), bad URLs (kInvalid).
  virtual void request(HttpRequest request, Callback done) = 0;
};

// Boost.Beast implementation: one connection per request ("Connection: close"), the Host
// header and Content-Length filled in when absent. Requests in flight when the EventLoop is
// destroyed are dropped without calling `done`.
class BeastHttpClient final : public HttpClient {
 public:
  explicit BeastHttpClient(EventLoop& loop) : loop_(loop) {}
  void request(HttpRequest request, Callback done) override;

 private:
  EventLoop& loop_;
};

// Runs one request to completion on a private EventLoop; for CLIs and scripts, never for
// code that already runs on a loop.
Result<HttpResponse> http_request_blocking(HttpRequest request);

}  // namespace shardguard::io
