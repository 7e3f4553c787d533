#include "agent/aws_token.h"

#include <algorithm>
#include <charconv>

namespace shardguard::agent {

namespace {
constexpr std::string_view kTtlHeader = "X-aws-ec2-metadata-token-ttl-seconds";
constexpr Duration kMaxTtl = std::chrono::seconds(21600);
}  // namespace

ImdsToken::ImdsToken(io::HttpClient& http, const Clock& clock, std::string base_url, Duration ttl,
                     Duration timeout)
    : http_(http),
      clock_(clock),
      base_url_(std::move(base_url)),
      ttl_(std::clamp<Duration>(ttl, std::chrono::seconds(1), kMaxTtl)),
      timeout_(timeout) {}

void ImdsToken::get(Callback done) {
  if (!token_.empty() && clock_.now() < renew_at_) {
    done(token_);
    return;
  }
  waiters_.push_back(std::move(done));
  if (!in_flight_) fetch();
}

void ImdsToken::invalidate(const std::string& token) {
  if (token == token_) token_.clear();
}

void ImdsToken::reset() {
  guard_.invalidate();
  token_.clear();
  in_flight_ = false;
  waiters_.clear();
}

void ImdsToken::fetch() {
  in_flight_ = true;
  ++fetches_;
  io::HttpRequest request;
  request.method = "PUT";
  request.url = base_url_ + "/latest/api/token";
  request.headers.add(
      std::string(kTtlHeader),
      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(ttl_).count()));
  request.timeout = timeout_;
  request.max_body_bytes = 4096;
  const SteadyTime asked_at = clock_.now();
  http_.request(std::move(request), guard_.wrap([this, asked_at](Result<io::HttpResponse> r) {
    if (!r.ok()) return finish(r.error().context("IMDSv2 token"));
    if (r->status != 200 || r->body.empty()) {
      return finish(Error(ErrorCode::kIo, "IMDSv2 token: PUT /latest/api/token answered " +
                                              std::to_string(r->status)));
    }
    Duration ttl = ttl_;
    if (auto echoed = r->headers.get(kTtlHeader)) {
      int64_t seconds = 0;
      auto [end, ec] = std::from_chars(echoed->data(), echoed->data() + echoed->size(), seconds);
      if (ec == std::errc() && end == echoed->data() + echoed->size() && seconds > 0) {
        ttl = std::min<Duration>(ttl, std::chrono::seconds(seconds));
      }
    }
    // Renew with a margin so a request never carries a token about to expire in flight.
    const Duration margin = std::min<Duration>(std::chrono::seconds(60), ttl / 4);
    renew_at_ = asked_at + ttl - margin;
    token_ = r->body;
    finish(token_);
  }));
}

void ImdsToken::finish(Result<std::string> result) {
  in_flight_ = false;
  auto waiters = std::move(waiters_);
  waiters_.clear();
  for (auto& w : waiters) w(result);
}

}  // namespace shardguard::agent
