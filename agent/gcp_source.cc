#include "agent/gcp_source.h"

#include <algorithm>
#include <cctype>

namespace shardguard::agent {

namespace {

constexpr std::string_view kPreempted = "instance/preempted";
constexpr std::string_view kMaintenance = "instance/maintenance-event";

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

// Percent-encodes everything but unreserved characters (ETags may carry quotes).
std::string url_encode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace

GcpSource::GcpSource(GcpSourceConfig config, io::HttpClient& http, const Clock& clock,
                     TimerFactory& timers, RandomFn random)
    : config_(std::move(config)), http_(http), clock_(clock), log_("gcp", clock) {
  auto add = [&](bool on, std::string_view key) {
    if (!on) return;
    auto w = std::make_unique<Watch>();
    w->key = key;
    w->timer = std::make_unique<PollTimer>(timers, config_.min_rewatch, config_.backoff, random);
    watches_.push_back(std::move(w));
  };
  add(config_.watch_preempted, kPreempted);
  add(config_.watch_maintenance, kMaintenance);
}

GcpSource::~GcpSource() { stop(); }

void GcpSource::start(Callback on_notice) {
  stop();
  set_callback(std::move(on_notice));
  for (auto& w : watches_) {
    w->etag.clear();  // first read is a plain GET again
    Watch* watch = w.get();
    w->timer->soon(guard_.wrap([this, watch] { poll(*watch); }));
  }
}

void GcpSource::stop() {
  guard_.invalidate();
  clear_callback();
  for (auto& w : watches_) w->timer->cancel();
}

void GcpSource::poll(Watch& w) {
  count_poll();
  io::HttpRequest request;
  request.url = config_.base_url + "/computeMetadata/v1/" + w.key;
  request.headers.add("Metadata-Flavor", "Google");
  request.max_body_bytes = 4096;
  request.timeout = config_.request_timeout;
  if (!w.etag.empty()) {
    const auto wait_s = std::chrono::duration_cast<std::chrono::seconds>(config_.wait_timeout);
    request.url += "?wait_for_change=true&last_etag=" + url_encode(w.etag) +
                   "&timeout_sec=" + std::to_string(std::max<int64_t>(1, wait_s.count()));
    request.timeout =
        std::chrono::seconds(std::max<int64_t>(1, wait_s.count())) + config_.wait_margin;
  }
  http_.request(std::move(request),
                guard_.wrap([this, &w, asked_at = clock_.now()](Result<io::HttpResponse> r) {
                  on_answer(w, asked_at, std::move(r));
                }));
}

void GcpSource::on_answer(Watch& w, SteadyTime asked_at, Result<io::HttpResponse> r) {
  if (!r.ok()) return failed(w, r.error().message());
  const std::string what = "GET " + config_.base_url + "/computeMetadata/v1/" + w.key;
  if (r->status != 200) return failed(w, what + ": HTTP " + std::to_string(r->status));
  const std::string value = trim(r->body);
  if (!known_value(w.key, value)) {
    return failed(w, what + ": unexpected value '" + value.substr(0, 64) + "'");
  }
  const std::string etag = r->headers.get("ETag").value_or("");
  const bool changed = !etag.empty() && etag != w.etag;
  w.etag = etag;
  log_.recovered();
  // Re-arm before delivering: a stop() from inside the callback must win.
  w.timer->reset_backoff();
  const Duration elapsed = clock_.now() - asked_at;
  const bool quick_repeat = !changed && elapsed < config_.min_rewatch;
  w.timer->after(quick_repeat ? config_.min_rewatch - elapsed : Duration(0),
                 guard_.wrap([this, &w] { poll(w); }));
  apply(w, value, etag);
}

bool GcpSource::known_value(const std::string& key, const std::string& value) {
  if (key == kPreempted) return value == "TRUE" || value == "FALSE";
  return value == "NONE" || value == "MIGRATE_ON_HOST_MAINTENANCE" ||
         value == "TERMINATE_ON_HOST_MAINTENANCE";
}

void GcpSource::apply(Watch& w, const std::string& value, const std::string& etag) {
  Notice n;
  n.source = "gcp";
  bool event = false;
  if (w.key == kPreempted) {
    event = value == "TRUE";
    n.kind = "preempted";
    n.is_preemption = true;
    n.deadline = clock_.wall_now() + config_.preempt_notice;
    n.detail = "instance/preempted is TRUE";
  } else {
    event = value != "NONE";
    n.kind = value == "MIGRATE_ON_HOST_MAINTENANCE" ? "migrate" : "maintenance";
    n.is_preemption = value == "TERMINATE_ON_HOST_MAINTENANCE";
    n.deadline = clock_.wall_now() + config_.maintenance_notice;
    n.detail = "instance/maintenance-event is " + value;
  }
  if (!event) {
    w.in_event = false;
    return;
  }
  if (!w.in_event) ++w.episode;
  w.in_event = true;
  n.event_id = w.key + "#" + std::to_string(w.episode) + (etag.empty() ? "" : "@" + etag);
  deliver(w.key + "#" + std::to_string(w.episode) + "|" + n.kind, n);
}

void GcpSource::failed(Watch& w, std::string_view what) {
  count_error();
  log_.failure(what);
  w.timer->after_error(guard_.wrap([this, &w] { poll(w); }));
}

}  // namespace shardguard::agent
