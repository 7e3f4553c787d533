// Azure Scheduled Events: polls GET /metadata/scheduledevents?api-version=... (header
// Metadata: true), turns the events whose Resources name this VM into notices (Preempt,
// Terminate, Reboot, Redeploy; Freeze is advisory) with NotBefore as the deadline, and
// acknowledges with POST {"StartRequests":[{"EventId":...}]} when asked. The VM name is
// configured or read from IMDS (compute/name) before the first poll. Timeouts, 410, 429,
// 5xx and bad bodies are "no information", retried with backoff.
//
// Thread-safety: construct, start, stop, acknowledge on the loop thread; see NoticeSource.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "agent/backoff.h"
#include "agent/callback_guard.h"
#include "agent/error_log.h"
#include "agent/notice.h"
#include "io/http_client.h"

namespace shardguard::agent {

struct AzureSourceConfig {
  std::string base_url = "http://169.254.169.254";
  std::string api_version = "2020-07-01";
  std::string vm_name;                               // empty: read compute/name from IMDS
  Duration poll_interval = std::chrono::seconds(1);  // Azure's advice; limit is 5 req/s
  Duration request_timeout = std::chrono::seconds(2);
  // The service starts on the first call, which may take up to 2 minutes to answer.
  Duration first_request_timeout = std::chrono::seconds(120);
  int ack_attempts = 5;
  BackoffConfig backoff;
};

class AzureSource final : public NoticeSource {
 public:
  // `http`, `clock` and `timers` must outlive the source.
  AzureSource(AzureSourceConfig config, io::HttpClient& http, const Clock& clock,
              TimerFactory& timers, RandomFn random);
  ~AzureSource() override;

  std::string_view name() const override { return "azure"; }
  void start(Callback on_notice) override;
  void stop() override;
  // POSTs StartRequests for notice.event_id (Azure notices only), retrying up to
  // ack_attempts times with backoff. Also works while stopped.
  void acknowledge(const Notice& notice) override;
  // The VM name in use (configured or learned); empty until known.
  const std::string& vm_name() const { return vm_name_; }

 private:
  struct Ack {
    int attempts = 0;
    std::unique_ptr<PollTimer> timer;
  };

  void fetch_vm_name();
  void poll();
  void on_events(Result<io::HttpResponse> r);
  void failed(std::string_view what);
  void send_ack(const std::string& event_id);
  io::HttpRequest make_request(std::string method, std::string path_and_query) const;

  AzureSourceConfig config_;
  io::HttpClient& http_;
  const Clock& clock_;
  TimerFactory& timers_;
  RandomFn random_;
  ErrorLog log_;
  PollTimer timer_;
  std::string vm_name_;
  bool answered_once_ = false;
  int64_t incarnation_ = -1;
  std::map<std::string, Ack> acks_;
  CallbackGuard guard_;      // polling; invalidated by stop()
  CallbackGuard ack_guard_;  // acknowledgements; live as long as the source
};

}  // namespace shardguard::agent
