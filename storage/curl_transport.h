// HttpTransport over libcurl's multi interface: one multi handle and one thread that drives
// every transfer, so connections (and TLS sessions) are reused across requests and across the
// threads that call perform(); callers block on their own request only. HTTP/1.1, keep-alive,
// no `Expect: 100-continue` round trip, no signals (CURLOPT_NOSIGNAL), TLS verified unless
// told otherwise.
// Thread-safety: perform() from any number of threads; the destructor fails requests still in
// flight (kCancelled) and joins the thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "storage/http.h"

namespace shardguard::storage {

struct CurlOptions {
  bool verify_tls = true;     // peer certificate and host name
  std::string ca_file;        // empty: the system's bundle
  size_t max_connections = 64;  // kept open for reuse (the connection cache)
  // Bytes a transfer's buffers take at most (CURLOPT_BUFFERSIZE / UPLOAD_BUFFERSIZE).
  size_t buffer_bytes = 512 * 1024;
};

class CurlTransport final : public HttpTransport {
 public:
  // kIo when libcurl cannot start (no memory, no multi handle).
  static Result<std::unique_ptr<CurlTransport>> create(CurlOptions options = {});
  ~CurlTransport() override;
  CurlTransport(const CurlTransport&) = delete;
  CurlTransport& operator=(const CurlTransport&) = delete;

  Result<HttpResponse> perform(const HttpRequest& request) override;

 private:
  struct Impl;
  explicit CurlTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::storage
