// How the metadata emulator answers as AWS IMDSv2, the GCP metadata server and Azure IMDS
// (Scheduled Events), following docs/reference/preemption-protocols.md sections 1-3.
#include <boost/json.hpp>
#include <thread>

#include "tests/agent/emulator_state.h"

namespace shardguard::testing {

namespace json = boost::json;
using Clock = std::chrono::steady_clock;

namespace {

EmulatorAnswer text(int status, std::string body, WireHeaders headers = {}) {
  headers.emplace_back("Content-Type", "text/plain");
  return EmulatorAnswer{status, std::move(headers), std::move(body)};
}

// FNV-1a: the ETag is a function of the content, so restoring a value restores its ETag.
std::string content_etag(const std::string& body) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : body) h = (h ^ c) * 1099511628211ull;
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string aws_default(const std::string& path, int& status) {
  status = 200;
  if (path == kAwsScheduledPath) return "[]";
  if (path == "/latest/meta-data/instance-id") return "i-0123456789abcdef0";
  status = 404;
  return "";
}

std::string gcp_default(const std::string& path, int& status) {
  status = 200;
  if (path == kGcpPreemptedPath) return "FALSE";
  if (path == kGcpMaintenancePath) return "NONE";
  if (path == "/computeMetadata/v1/instance/id") return "1234567890123456789";
  status = 404;
  return "";
}

// The instance role's routes; nullopt for other paths.
std::optional<EmulatorAnswer> aws_role_answer(EmulatorState& s, const std::string& path) {
  const std::string roles = kAwsRolesPath;
  const AwsInstanceRole& role = s.scenario.aws_role;
  if (path == roles || path == roles.substr(0, roles.size() - 1)) {  // the list
    return role.name.empty() ? text(404, "") : text(200, role.name);
  }
  if (path.rfind(roles, 0) != 0) return std::nullopt;
  if (role.name.empty() || path.substr(roles.size()) != role.name) return text(404, "");
  const int64_t now_ms = s.now_ms();
  const std::string now = expand_placeholders("${rfc3339:+0}", s.wall_start, now_ms);
  json::object doc{{"Code", role.code}, {"LastUpdated", now}};
  if (role.code == "Success") {
    uint64_t n;
    {
      std::lock_guard lock(s.mu);
      n = ++s.aws_role_fetches;
    }
    const std::string suffix = role.rotate ? std::to_string(n) : "";
    doc["Type"] = "AWS-HMAC";
    doc["AccessKeyId"] = role.access_key_id + suffix;
    doc["SecretAccessKey"] = role.secret_access_key + suffix;
    doc["Token"] = role.token + suffix;
    doc["Expiration"] = expand_placeholders(
        "${rfc3339:+" + std::to_string(role.expires_after_s) + "}", s.wall_start, now_ms);
  } else {
    doc["Message"] = "emulated failure of instance role " + role.name;
  }
  return text(200, json::serialize(doc));  // text/plain, as EC2 sends it
}

}  // namespace

EmulatorAnswer answer_aws(EmulatorState& s, const WireRequest& r) {
  if (r.path == "/latest/api/token") {
    if (r.method != "PUT") return text(405, "");
    if (r.header("X-Forwarded-For")) return text(403, "");
    const auto ttl_text = r.header("X-aws-ec2-metadata-token-ttl-seconds");
    const long ttl = ttl_text ? std::strtol(ttl_text->c_str(), nullptr, 10) : 0;
    if (ttl < 1 || ttl > 21600) return text(400, "");
    std::lock_guard lock(s.mu);
    const std::string token = "AQAEA-emulated-" + std::to_string(s.next_token++);
    auto life = std::chrono::milliseconds(ttl * 1000);
    if (s.scenario.aws_token_lifetime_ms >= 0) {
      life = std::min(life, std::chrono::milliseconds(s.scenario.aws_token_lifetime_ms));
    }
    s.aws_tokens[token] = Clock::now() + life;
    return text(200, token, {{"X-aws-ec2-metadata-token-ttl-seconds", *ttl_text}});
  }
  if (r.method != "GET" && r.method != "HEAD") return text(405, "");
  if (const auto token = r.header("X-aws-ec2-metadata-token")) {
    std::lock_guard lock(s.mu);
    auto it = s.aws_tokens.find(*token);
    if (it == s.aws_tokens.end() || it->second <= Clock::now()) return text(401, "");
  } else if (s.scenario.imdsv2_required) {
    return text(401, "");
  }
  if (auto a = timeline_answer(s, r.path, s.now_ms())) return text(a->status, a->body);
  if (auto a = aws_role_answer(s, r.path)) return *std::move(a);
  int status = 404;
  std::string body = aws_default(r.path, status);
  return text(status, body);
}

EmulatorAnswer answer_gcp(EmulatorState& s, const WireRequest& r,
                          const std::function<bool()>& alive) {
  if (r.header("Metadata-Flavor") != "Google") return text(403, "Missing Metadata-Flavor header");
  if (r.method != "GET") return text(405, "");
  auto current = [&](int& status) {
    if (auto a = timeline_answer(s, r.path, s.now_ms())) {
      status = a->status;
      return a->body;
    }
    return gcp_default(r.path, status);
  };
  int status = 200;
  std::string body = current(status);
  if (r.param("wait_for_change") == "true" && status == 200) {
    const std::string last = r.param("last_etag").value_or("");
    int64_t wait_ms = s.scenario.gcp_max_wait_ms;
    if (auto t = r.param("timeout_sec")) wait_ms = std::strtoll(t->c_str(), nullptr, 10) * 1000;
    const auto until = Clock::now() + std::chrono::milliseconds(wait_ms);
    // A stale last_etag returns at once; otherwise hold until the value changes.
    const std::string watched = last.empty() ? content_etag(body) : last;
    while (content_etag(body) == watched && status == 200 && Clock::now() < until) {
      if (!alive()) return EmulatorAnswer{0, {}, ""};
      body = current(status);
    }
  }
  return text(status, body, {{"Metadata-Flavor", "Google"}, {"ETag", content_etag(body)}});
}

namespace {

std::string azure_document(EmulatorState& s) {
  const int64_t now = s.now_ms();
  std::lock_guard lock(s.mu);
  json::array events;
  int64_t incarnation = 1;
  for (size_t i = 0; i < s.scenario.azure_events.size(); ++i) {
    const AzureEventScript& e = s.scenario.azure_events[i];
    if (e.at_ms <= now) ++incarnation;
    if (e.until_ms >= 0 && e.until_ms <= now) ++incarnation;
    if (e.at_ms > now || (e.until_ms >= 0 && e.until_ms <= now)) continue;
    boost::system::error_code ec;
    json::value v = json::parse(expand_placeholders(e.event_json, s.wall_start, e.at_ms), ec);
    if (ec) continue;  // start() checked the script; a placeholder cannot break it
    if (s.azure_acked.count(s.azure_event_ids[i]) != 0 && v.is_object()) {
      ++incarnation;
      v.get_object()["EventStatus"] = "Started";
      v.get_object()["NotBefore"] = "";
    }
    events.push_back(std::move(v));
  }
  return json::serialize(
      json::object{{"DocumentIncarnation", incarnation}, {"Events", std::move(events)}});
}

EmulatorAnswer azure_ack(EmulatorState& s, const WireRequest& r) {
  boost::system::error_code ec;
  json::value v = json::parse(r.body, ec);
  const json::object* obj = ec ? nullptr : v.if_object();
  const json::value* starts = obj != nullptr ? obj->if_contains("StartRequests") : nullptr;
  if (starts == nullptr || !starts->is_array()) return text(400, "Bad Request");
  std::lock_guard lock(s.mu);
  for (const auto& sr : starts->get_array()) {
    const json::object* so = sr.if_object();
    const json::value* id = so != nullptr ? so->if_contains("EventId") : nullptr;
    if (id == nullptr || !id->is_string()) return text(400, "Bad Request");
    s.azure_acked.insert(std::string(id->get_string()));
  }
  return text(200, "");
}

}  // namespace

EmulatorAnswer answer_azure(EmulatorState& s, const WireRequest& r) {
  if (r.header("Metadata") != "true") {
    return text(400, R"({"error":"Bad request. Required metadata header not specified"})");
  }
  if (!r.param("api-version")) return text(400, R"({"error":"Bad request. api-version missing"})");
  if (r.path == "/metadata/instance/compute/name") {
    if (auto a = timeline_answer(s, r.path, s.now_ms())) return text(a->status, a->body);
    return text(200, s.scenario.azure_vm_name);
  }
  if (r.path != kAzureEventsPath) {
    if (auto a = timeline_answer(s, r.path, s.now_ms())) return text(a->status, a->body);
    return text(404, "");
  }
  if (r.method == "POST") return azure_ack(s, r);
  if (r.method != "GET") return text(405, "");
  if (auto a = timeline_answer(s, r.path, s.now_ms())) return text(a->status, a->body);
  EmulatorAnswer a = text(200, azure_document(s));
  a.headers = {{"Content-Type", "application/json; charset=utf-8"}};
  return a;
}

}  // namespace shardguard::testing
