// AWS EC2 notices through IMDSv2: spot interruption (spot/instance-action), rebalance
// recommendation (advisory) and scheduled maintenance, each polled on its own timer so a
// flaky path does not delay the others. 404 on a notice path means "nothing"; timeouts,
// connection errors, 5xx, 429 and bad bodies mean "no information": counted, logged with a
// rate limit, retried with jittered backoff, never a notice.
//
// Thread-safety: construct, start, stop on the loop thread; see NoticeSource.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "agent/aws_token.h"
#include "agent/backoff.h"
#include "agent/callback_guard.h"
#include "agent/error_log.h"
#include "agent/notice.h"
#include "io/http_client.h"

namespace shardguard::agent {

struct AwsSourceConfig {
  std::string base_url = "http://169.254.169.254";
  // AWS advises 5 s; a 2-minute notice minus the detection lag is the checkpoint budget,
  // so poll faster, as aws-node-termination-handler does.
  Duration poll_interval = std::chrono::seconds(2);
  Duration maintenance_interval = std::chrono::seconds(60);  // events come days ahead
  Duration request_timeout = std::chrono::seconds(2);
  Duration token_ttl = std::chrono::hours(6);
  Duration rebalance_horizon = std::chrono::minutes(2);  // deadline given to advisories
  bool watch_spot = true;
  bool watch_rebalance = true;
  bool watch_maintenance = true;
  BackoffConfig backoff;
};

class AwsSource final : public NoticeSource {
 public:
  // `http`, `clock` and `timers` must outlive the source.
  AwsSource(AwsSourceConfig config, io::HttpClient& http, const Clock& clock, TimerFactory& timers,
            RandomFn random);
  ~AwsSource() override;

  std::string_view name() const override { return "aws"; }
  void start(Callback on_notice) override;
  void stop() override;
  uint64_t token_fetches() const { return token_.fetches(); }

 private:
  enum class Path { kSpot, kRebalance, kMaintenance };
  struct Watch {
    Path path;
    std::string url_path;
    std::unique_ptr<PollTimer> timer;
    bool retried_after_401 = false;
  };

  void poll(Watch& w);
  void on_answer(Watch& w, const std::string& token, Result<io::HttpResponse> r);
  void handle_body(Watch& w, const std::string& body);
  void answered(Watch& w);
  void failed(Watch& w, std::string_view what);

  AwsSourceConfig config_;
  io::HttpClient& http_;
  const Clock& clock_;
  ImdsToken token_;
  ErrorLog log_;
  std::vector<std::unique_ptr<Watch>> watches_;
  CallbackGuard guard_;
};

}  // namespace shardguard::agent
