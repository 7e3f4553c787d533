#include "agent/aws_source.h"

#include "agent/aws_parse.h"

namespace shardguard::agent {

AwsSource::AwsSource(AwsSourceConfig config, io::HttpClient& http, const Clock& clock,
                     TimerFactory& timers, RandomFn random)
    : config_(std::move(config)),
      http_(http),
      clock_(clock),
      token_(http, clock, config_.base_url, config_.token_ttl, config_.request_timeout),
      log_("aws", clock) {
  auto add = [&](bool on, Path path, std::string url_path, Duration interval) {
    if (!on) return;
    auto w = std::make_unique<Watch>();
    w->path = path;
    w->url_path = std::move(url_path);
    w->timer = std::make_unique<PollTimer>(timers, interval, config_.backoff, random);
    watches_.push_back(std::move(w));
  };
  add(config_.watch_spot, Path::kSpot, "/latest/meta-data/spot/instance-action",
      config_.poll_interval);
  add(config_.watch_rebalance, Path::kRebalance,
      "/latest/meta-data/events/recommendations/rebalance", config_.poll_interval);
  add(config_.watch_maintenance, Path::kMaintenance,
      "/latest/meta-data/events/maintenance/scheduled", config_.maintenance_interval);
}

AwsSource::~AwsSource() { stop(); }

void AwsSource::start(Callback on_notice) {
  stop();
  set_callback(std::move(on_notice));
  for (auto& w : watches_) {
    Watch* watch = w.get();
    w->timer->soon(guard_.wrap([this, watch] { poll(*watch); }));
  }
}

void AwsSource::stop() {
  guard_.invalidate();
  clear_callback();
  token_.reset();
  for (auto& w : watches_) {
    w->timer->cancel();
    w->retried_after_401 = false;
  }
}

void AwsSource::poll(Watch& w) {
  count_poll();
  token_.get(guard_.wrap([this, &w](Result<std::string> token) {
    if (!token.ok()) return failed(w, token.error().message());
    io::HttpRequest request;
    request.url = config_.base_url + w.url_path;
    request.headers.add("X-aws-ec2-metadata-token", *token);
    request.timeout = config_.request_timeout;
    request.max_body_bytes = 64 * 1024;
    http_.request(std::move(request),
                  guard_.wrap([this, &w, used = *token](Result<io::HttpResponse> r) {
                    on_answer(w, used, std::move(r));
                  }));
  }));
}

void AwsSource::on_answer(Watch& w, const std::string& token, Result<io::HttpResponse> r) {
  const std::string what = "GET " + config_.base_url + w.url_path;
  if (!r.ok()) return failed(w, r.error().message());
  if (r->status == 401) {
    // The token expired or was revoked early: fetch a new one and retry once at once.
    token_.invalidate(token);
    if (!w.retried_after_401) {
      w.retried_after_401 = true;
      count_error();
      w.timer->soon(guard_.wrap([this, &w] { poll(w); }));
      return;
    }
    return failed(w, what + ": 401 again with a fresh token");
  }
  w.retried_after_401 = false;
  if (r->status == 404) return answered(w);  // the documented "nothing"
  if (r->status != 200) return failed(w, what + ": HTTP " + std::to_string(r->status));
  handle_body(w, r->body);
}

void AwsSource::handle_body(Watch& w, const std::string& body) {
  const WallTime now = clock_.wall_now();
  std::vector<Notice> notices;
  switch (w.path) {
    case Path::kSpot: {
      auto n = parse_aws_spot_action(body, now);
      if (!n.ok()) return failed(w, n.error().message());
      notices.push_back(std::move(n).value());
      break;
    }
    case Path::kRebalance: {
      auto n = parse_aws_rebalance(body, now, config_.rebalance_horizon);
      if (!n.ok()) return failed(w, n.error().message());
      notices.push_back(std::move(n).value());
      break;
    }
    case Path::kMaintenance: {
      auto ns = parse_aws_scheduled_events(body, now);
      if (!ns.ok()) return failed(w, ns.error().message());
      notices = std::move(ns).value();
      break;
    }
  }
  answered(w);  // before delivering: a stop() from inside the callback must win over it
  for (const Notice& n : notices) deliver(n.kind + "|" + n.event_id, n);
}

void AwsSource::answered(Watch& w) {
  log_.recovered();
  w.timer->after_answer(guard_.wrap([this, &w] { poll(w); }));
}

void AwsSource::failed(Watch& w, std::string_view what) {
  count_error();
  log_.failure(what);
  w.timer->after_error(guard_.wrap([this, &w] { poll(w); }));
}

}  // namespace shardguard::agent
