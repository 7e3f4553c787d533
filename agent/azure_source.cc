#include "agent/azure_source.h"

#include <spdlog/spdlog.h>

#include <cctype>

#include "agent/azure_parse.h"

namespace shardguard::agent {

AzureSource::AzureSource(AzureSourceConfig config, io::HttpClient& http, const Clock& clock,
                         TimerFactory& timers, RandomFn random)
    : config_(std::move(config)),
      http_(http),
      clock_(clock),
      timers_(timers),
      random_(random),
      log_("azure", clock),
      timer_(timers, config_.poll_interval, config_.backoff, random),
      vm_name_(config_.vm_name) {}

AzureSource::~AzureSource() { stop(); }

void AzureSource::start(Callback on_notice) {
  stop();
  set_callback(std::move(on_notice));
  if (vm_name_.empty()) {
    timer_.soon(guard_.wrap([this] { fetch_vm_name(); }));
  } else {
    timer_.soon(guard_.wrap([this] { poll(); }));
  }
}

void AzureSource::stop() {
  guard_.invalidate();
  clear_callback();
  timer_.cancel();
}

io::HttpRequest AzureSource::make_request(std::string method, std::string path_and_query) const {
  io::HttpRequest request;
  request.method = std::move(method);
  request.url = config_.base_url + path_and_query;
  request.headers.add("Metadata", "true");
  request.timeout = config_.request_timeout;
  request.max_body_bytes = 256 * 1024;
  return request;
}

void AzureSource::fetch_vm_name() {
  count_poll();
  auto request = make_request("GET",
                              "/metadata/instance/compute/name?api-version=2021-02-01"
                              "&format=text");
  http_.request(std::move(request), guard_.wrap([this](Result<io::HttpResponse> r) {
    if (!r.ok()) return failed("VM name: " + r.error().message());
    std::string name = r->body;
    while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
    if (r->status != 200 || name.empty()) {
      return failed("VM name: GET compute/name answered HTTP " + std::to_string(r->status));
    }
    vm_name_ = name;
    spdlog::info("azure: this VM is '{}'", vm_name_);
    timer_.reset_backoff();
    timer_.soon(guard_.wrap([this] { poll(); }));
  }));
}

void AzureSource::poll() {
  count_poll();
  auto request =
      make_request("GET", "/metadata/scheduledevents?api-version=" + config_.api_version);
  if (!answered_once_) request.timeout = config_.first_request_timeout;
  http_.request(std::move(request),
                guard_.wrap([this](Result<io::HttpResponse> r) { on_events(std::move(r)); }));
}

void AzureSource::on_events(Result<io::HttpResponse> r) {
  if (!r.ok()) return failed(r.error().message());
  if (r->status != 200) {
    return failed("GET " + config_.base_url + "/metadata/scheduledevents: HTTP " +
                  std::to_string(r->status));
  }
  auto doc = parse_azure_document(r->body);
  if (!doc.ok()) return failed(doc.error().message());
  answered_once_ = true;
  const WallTime now = clock_.wall_now();
  std::vector<Notice> notices;
  bool bad = doc->malformed_events > 0;
  for (const AzureEvent& e : doc->events) {
    auto n = azure_notice(e, vm_name_, now);
    if (!n.ok()) {
      log_.failure(n.error().message());
      bad = true;
    } else if (n->has_value()) {
      notices.push_back(std::move(**n));
    }
  }
  if (bad) {
    count_error();
  } else {
    log_.recovered();
  }
  if (doc->incarnation != incarnation_) {
    spdlog::debug("azure: scheduled events incarnation {} ({} events)", doc->incarnation,
                  doc->events.size());
    incarnation_ = doc->incarnation;
  }
  timer_.after_answer(guard_.wrap([this] { poll(); }));  // before delivering: stop() wins
  for (const Notice& n : notices) deliver(n.kind + "|" + n.event_id, n);
}

void AzureSource::failed(std::string_view what) {
  count_error();
  log_.failure(what);
  timer_.after_error(guard_.wrap([this] { vm_name_.empty() ? fetch_vm_name() : poll(); }));
}

void AzureSource::acknowledge(const Notice& notice) {
  if (notice.source != "azure" || notice.event_id.empty()) return;
  auto [it, inserted] = acks_.try_emplace(notice.event_id);
  if (!inserted) return;  // already being acknowledged
  it->second.timer =
      std::make_unique<PollTimer>(timers_, config_.poll_interval, config_.backoff, random_);
  send_ack(notice.event_id);
}

void AzureSource::send_ack(const std::string& event_id) {
  auto request =
      make_request("POST", "/metadata/scheduledevents?api-version=" + config_.api_version);
  request.headers.add("Content-Type", "application/json");
  request.body = azure_start_requests({event_id});
  ++acks_[event_id].attempts;
  http_.request(std::move(request), ack_guard_.wrap([this, event_id](Result<io::HttpResponse> r) {
    auto it = acks_.find(event_id);
    if (it == acks_.end()) return;
    if (r.ok() && r->status == 200) {
      spdlog::info("azure: acknowledged event {} (StartRequests)", event_id);
      acks_.erase(it);
      return;
    }
    count_error();
    const std::string why = r.ok() ? "HTTP " + std::to_string(r->status) : r.error().message();
    if (it->second.attempts >= config_.ack_attempts) {
      spdlog::warn("azure: giving up acknowledging event {} after {} attempts: {}", event_id,
                   it->second.attempts, why);
      acks_.erase(it);
      return;
    }
    log_.failure("acknowledge " + event_id + ": " + why);
    it->second.timer->after_error(ack_guard_.wrap([this, event_id] { send_ack(event_id); }));
  }));
}

}  // namespace shardguard::agent
