// FaultProxy: an HTTP/1.1 proxy on 127.0.0.1 that tests put between an S3 client and the
// server (the loopback Ceph RGW), to inject what a real server does on a bad day: bursts of
// 503 SlowDown (or any S3 error), connections reset in the middle of a body, stalled requests
// and responses, added latency, and a blackhole that stops all traffic.
//
// It understands HTTP/1.1 well enough to find each request on a keep-alive connection:
// request bodies by Content-Length or chunked, Expect: 100-continue (the upstream's interim
// answers are forwarded), responses by Content-Length, chunked or connection close, and no
// body after HEAD, 1xx, 204 and 304. Pipelining is not supported. Bytes are forwarded as
// received (the Host header is not rewritten, so SigV4 signatures stay valid). Each client
// connection gets its own upstream connection, opened at its first forwarded request.
//
// Faults are rules tried in order against each request; the first active rule that matches
// is applied (one fault per request) and its count goes down by one. A status answer reads
// and drops the request body and keeps the connection, except for a body announced with
// Expect: 100-continue, which is not asked for: the answer then says Connection: close. A
// reset is SO_LINGER 0 + close, so the client sees ECONNRESET. While a stall holds, that
// exchange moves no bytes either way; a client that hangs up ends it.
//
// A thread per client connection (at most 512); every wait polls a stop event, so the
// destructor returns promptly even with stalled clients or a silent upstream. An exchange
// with no progress for 60 s, or a connection idle for 300 s, is dropped.
//
// Thread-safety: every public member may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace shardguard::testing {

struct FaultRule {
  enum class Kind {
    kStatus,         // answer `status` with an S3 error body, without forwarding
    kResetRequest,   // reset the client after `after_bytes` of the request body went upstream
    kResetResponse,  // reset the client after `after_bytes` of the response went back
    kStallRequest,   // stop forwarding the request body after `after_bytes`
    kStallResponse,  // stop sending the response after `after_bytes`
    kDelay,          // wait `duration`, then forward normally
    kStall = kStallResponse,
  };

  // What requests the rule matches; an empty field matches anything. `method` is compared
  // ignoring case; the others are substrings of the path (before '?') and of the query.
  std::string method;
  std::string path_contains;
  std::string query_contains;

  Kind kind = Kind::kStatus;
  // kStatus: the status, the S3 <Code> and <Message> (empty: the usual text for the code).
  int status = 503;
  std::string s3_code = "SlowDown";
  std::string s3_message;
  // Resets and stalls: bytes that pass first. For requests, bytes of the body as sent (chunk
  // framing included); a shorter body triggers the fault when it ends. For responses, bytes of
  // the final response as sent, head included (interim 100 Continue not counted); a shorter
  // response is sent whole.
  uint64_t after_bytes = 0;
  // kDelay: the added latency. kStatus: wait this long before answering. Stalls: how long
  // the stall lasts; 0 means until release(), remove(), clear() or the proxy's destruction.
  std::chrono::milliseconds duration{0};
  // Stalls: when the stall ends, reset the client connection instead of resuming.
  bool reset_after_stall = false;
  // How many matching requests the rule applies to; -1 (any negative): until removed.
  int count = 1;
};

// Parses a rule written as comma-separated key=value pairs, as sg_fault_proxy takes them:
// "kind=status,method=PUT,path=/bucket/,query=partNumber=2,status=503,code=SlowDown,count=2".
// Keys: kind (status, reset-request, reset-response, stall-request, stall-response, stall,
// delay), method, path, query, status, code, message, after (bytes), ms (duration), count,
// reset_after_stall (0/1). Values cannot hold ','. kInvalid names the spec and the bad key.
Result<FaultRule> parse_fault_rule(std::string_view spec);

class FaultProxy {
 public:
  // Listens on 127.0.0.1 at an ephemeral port and forwards to upstream_host:upstream_port,
  // which must resolve to a loopback address (kInvalid otherwise). The upstream need not be
  // up yet: it is connected per client connection, and a refused connect answers 502.
  static Result<std::unique_ptr<FaultProxy>> start(std::string upstream_host,
                                                   uint16_t upstream_port);
  // Stops accepting, ends every connection (stalled or not) and joins all threads.
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  // The listening port, and the URL clients use: "http://127.0.0.1:PORT".
  uint16_t port() const;
  std::string endpoint() const;

  // Appends a rule (tried after the earlier ones) and returns its id (1, 2, ...).
  int add(FaultRule rule);
  // Retires the rule: it matches no more requests and its stalls in progress end.
  void remove(int id);
  // Removes every rule.
  void clear();
  // Ends the stalls of the rule now in progress; the rule keeps matching (until its count).
  void release(int id);

  // Requests seen since start (each counted when its head was read, before any fault).
  uint64_t requests() const;
  // Requests whose method equals `method` (ignoring case) and whose path contains
  // `path_contains`; an empty filter matches anything.
  uint64_t requests_matching(std::string_view method, std::string_view path_contains) const;
  // How many requests the rule has been applied to; 0 for an unknown id.
  int applied(int id) const;
  // Client connections accepted since start.
  uint64_t connections() const;

  // On: no byte moves on any connection, new or existing, and nothing is connected upstream,
  // as if the server stopped answering. Off: traffic resumes where it stopped.
  void set_blackhole(bool on);

  // "METHOD target" per request in order, e.g. "PUT /bucket/key?partNumber=2&uploadId=x";
  // the first 100000 requests (requests_matching counts those too).
  std::vector<std::string> request_log() const;

 private:
  struct Impl;
  explicit FaultProxy(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::testing
