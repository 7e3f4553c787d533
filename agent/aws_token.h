// The AWS IMDSv2 session token: PUT /latest/api/token with the TTL header, cached and
// renewed before it expires (using the TTL the service echoes back), dropped on a 401.
// Concurrent callers while a PUT is in flight share it.
//
// Thread-safety: none; on the loop thread only.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "agent/callback_guard.h"
#include "core/clock.h"
#include "core/result.h"
#include "io/http_client.h"

namespace shardguard::agent {

class ImdsToken {
 public:
  using Callback = std::function<void(Result<std::string>)>;
  // `ttl` is clamped to the service's 1 s .. 6 h.
  ImdsToken(io::HttpClient& http, const Clock& clock, std::string base_url, Duration ttl,
            Duration timeout);

  // Calls `done` with a token valid for at least the renewal margin, fetching one when
  // needed. With a cached token `done` runs inline; otherwise on a later HTTP callback.
  void get(Callback done);
  // Forgets `token` if it is the cached one (the service answered 401 to it).
  void invalidate(const std::string& token);
  // Drops the cached token and every waiting caller (their callbacks never run).
  void reset();
  uint64_t fetches() const { return fetches_; }

 private:
  void fetch();
  void finish(Result<std::string> result);

  io::HttpClient& http_;
  const Clock& clock_;
  std::string base_url_;
  Duration ttl_;
  Duration timeout_;
  std::string token_;
  SteadyTime renew_at_{};
  bool in_flight_ = false;
  std::vector<Callback> waiters_;
  uint64_t fetches_ = 0;
  CallbackGuard guard_;
};

}  // namespace shardguard::agent
