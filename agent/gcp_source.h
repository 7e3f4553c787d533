// GCP Compute Engine notices from the metadata server: instance/preempted (TRUE once a Spot
// or preemptible VM got its 30 s notice) and instance/maintenance-event (TERMINATE_ON_HOST_
// MAINTENANCE: the VM will be stopped; MIGRATE_ON_HOST_MAINTENANCE: advisory). Each key is
// read once at start with a plain GET (a notice that came before the agent is not missed, and
// GCP only warns VMs that queried the key), then watched with hanging GETs
// (?wait_for_change=true&last_etag=ETAG&timeout_sec=N) whose HTTP timeout exceeds N.
// Timeouts, 403/404/5xx and unknown values are "no information", retried with backoff.
//
// Thread-safety: construct, start, stop on the loop thread; see NoticeSource.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "agent/backoff.h"
#include "agent/callback_guard.h"
#include "agent/error_log.h"
#include "agent/notice.h"
#include "io/http_client.h"

namespace shardguard::agent {

struct GcpSourceConfig {
  std::string base_url = "http://169.254.169.254";  // metadata.google.internal, no DNS needed
  bool watch_preempted = true;
  bool watch_maintenance = true;
  Duration request_timeout = std::chrono::seconds(2);  // the plain first read
  Duration wait_timeout = std::chrono::seconds(60);    // timeout_sec of the hanging GET
  Duration wait_margin = std::chrono::seconds(10);     // HTTP timeout = wait_timeout + this
  // Floor between hanging GETs that came back unchanged, against a server that ignores
  // wait_for_change.
  Duration min_rewatch = std::chrono::seconds(1);
  Duration preempt_notice = std::chrono::seconds(30);
  // Normal VMs get 60 s, GPU VMs about 1 h; assume the shorter unless configured.
  Duration maintenance_notice = std::chrono::seconds(60);
  BackoffConfig backoff;
};

class GcpSource final : public NoticeSource {
 public:
  // `http`, `clock` and `timers` must outlive the source.
  GcpSource(GcpSourceConfig config, io::HttpClient& http, const Clock& clock, TimerFactory& timers,
            RandomFn random);
  ~GcpSource() override;

  std::string_view name() const override { return "gcp"; }
  void start(Callback on_notice) override;
  void stop() override;

 private:
  struct Watch {
    std::string key;  // under /computeMetadata/v1/
    std::string etag;
    bool in_event = false;  // the last value was a notice value
    int episode = 0;        // times the value entered a notice value
    std::unique_ptr<PollTimer> timer;
  };

  void poll(Watch& w);
  void on_answer(Watch& w, SteadyTime asked_at, Result<io::HttpResponse> r);
  // True for the values `key` can take.
  static bool known_value(const std::string& key, const std::string& value);
  // Delivers a notice when `value` enters an event state.
  void apply(Watch& w, const std::string& value, const std::string& etag);
  void failed(Watch& w, std::string_view what);

  GcpSourceConfig config_;
  io::HttpClient& http_;
  const Clock& clock_;
  ErrorLog log_;
  std::vector<std::unique_ptr<Watch>> watches_;
  CallbackGuard guard_;
};

}  // namespace shardguard::agent
