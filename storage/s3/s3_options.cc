#include "storage/s3/s3_options.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "core/units.h"

namespace shardguard::storage::s3 {
namespace {

Error invalid(std::string_view where, std::string_view key, const std::string& why) {
  return Error(ErrorCode::kInvalid, std::string(where) + ": " + std::string(key) + ": " + why);
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
}

}  // namespace

std::string Endpoint::authority() const {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  if (port != 0) h += ":" + std::to_string(port);
  return h;
}

bool Endpoint::loopback() const {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  if (::inet_pton(AF_INET, host.c_str(), &a) == 1) return (ntohl(a.s_addr) >> 24) == 127;
  return false;
}

Result<Endpoint> parse_endpoint(std::string_view url) {
  const std::string text(url);
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::kInvalid, "endpoint '" + text + "': " + why);
  };
  Endpoint e;
  if (url.starts_with("https://")) {
    url.remove_prefix(8);
  } else if (url.starts_with("http://")) {
    e.https = false;
    url.remove_prefix(7);
  } else {
    return bad("expected http://HOST[:PORT] or https://HOST[:PORT]");
  }
  while (url.ends_with('/')) url.remove_suffix(1);
  if (url.find_first_of("/?#@") != std::string_view::npos)
    return bad("an endpoint has no path, query or user name");
  std::string_view port;
  if (url.starts_with('[')) {
    const auto close = url.find(']');
    if (close == std::string_view::npos) return bad("an IPv6 address needs its closing ']'");
    e.host = std::string(url.substr(1, close - 1));
    url.remove_prefix(close + 1);
    if (url.starts_with(':')) port = url.substr(1);
    else if (!url.empty()) return bad("unexpected text after the IPv6 address");
  } else {
    const auto colon = url.rfind(':');
    e.host = std::string(url.substr(0, colon));
    if (colon != std::string_view::npos) port = url.substr(colon + 1);
  }
  if (e.host.empty()) return bad("no host");
  for (unsigned char c : e.host)
    if (!(std::isalnum(c) || c == '.' || c == '-' || c == ':'))
      return bad("the host holds a character hosts do not have");
  if (!port.empty()) {
    unsigned value = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || p != port.data() + port.size() || value == 0 || value > 65535)
      return bad("the port is not a number from 1 to 65535");
    e.port = static_cast<uint16_t>(value);
  }
  return e;
}

bool use_path_style(const S3Options& options, const Endpoint& endpoint, std::string_view bucket) {
  switch (options.addressing) {
    case Addressing::kPath:
      return true;
    case Addressing::kVirtual:
      return false;
    case Addressing::kAuto:
      break;
  }
  // AWS prefers virtual hosts; bucket names with dots break TLS host names there.
  const bool aws = endpoint.host.ends_with(".amazonaws.com");
  return !aws || bucket.find('.') != std::string_view::npos;
}

int parallel_parts(const S3Options& options) {
  const uint64_t n = options.part_size == 0 ? 1 : options.max_inflight / options.part_size;
  return static_cast<int>(std::clamp<uint64_t>(n, 1, 64));
}

int parallel_reads(const S3Options& options) {
  const uint64_t n = options.read_size == 0 ? 1 : options.max_inflight / options.read_size;
  return static_cast<int>(std::clamp<uint64_t>(n, 1, 16));
}

Result<S3Options> resolve_s3_options(
    S3Options o, const std::function<std::optional<std::string>(std::string_view)>& getenv,
    const std::optional<std::string>& profile_region, std::string_view where) {
  if (o.region.empty()) {
    for (const char* var : {"AWS_REGION", "AWS_DEFAULT_REGION"})
      if (auto v = getenv(var); v && !v->empty()) {
        o.region = *v;
        break;
      }
    if (o.region.empty() && profile_region) o.region = *profile_region;
    if (o.region.empty()) o.region = "us-east-1";
  }
  for (unsigned char c : o.region)
    if (!(std::islower(c) || std::isdigit(c) || c == '-'))
      return invalid(where, "region", "'" + o.region + "' is not a region name");
  std::string endpoint_from = std::string(where) + " endpoint";
  if (o.endpoint.empty()) {
    for (const char* var : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"})
      if (auto v = getenv(var); v && !v->empty()) {
        o.endpoint = *v;
        endpoint_from = var;
        break;
      }
    if (o.endpoint.empty()) {
      o.endpoint = "https://s3." + o.region + ".amazonaws.com";
      endpoint_from = "the AWS endpoint of region " + o.region;
    }
  }
  auto ep = parse_endpoint(o.endpoint);
  if (!ep.ok()) return std::move(ep).error().context(endpoint_from);
  if (!ep->https && !ep->loopback() && !o.allow_http)
    return Error(ErrorCode::kInvalid,
                 endpoint_from + ": '" + o.endpoint +
                     "' is plain http to a host that is not loopback: credentials and weights "
                     "would cross the network unencrypted. Use https, or where the network is "
                     "yours set allow_http = true in [storage] (SHARDGUARD_S3_ALLOW_HTTP=1 for "
                     "`shardguard ckpt` and the job-side clients)");
  if (o.part_size < kMinPartSize || o.part_size > kMaxPartSize)
    return invalid(where, "part_size",
                   format_size(o.part_size) + " is outside S3's 5 MiB to 5 GiB for a part");
  if (o.read_size < kMinReadSize || o.read_size > kMaxReadSize)
    return invalid(where, "read_size", format_size(o.read_size) + " is outside 1 MiB to 64 MiB");
  if (o.max_inflight < o.part_size)
    return invalid(where, "max_inflight",
                   format_size(o.max_inflight) + " is less than one part (" +
                       format_size(o.part_size) + ")");
  if (o.retries < 0 || o.retries > 20) return invalid(where, "retries", "must be 0 to 20");
  if (o.request_timeout < std::chrono::seconds(1))
    return invalid(where, "request_timeout", "must be at least 1s");
  return o;
}

std::vector<std::pair<std::string, std::string>> s3_options_env(const S3Options& o) {
  auto ms = [](Duration d) {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
  };
  std::string addressing = o.addressing == Addressing::kPath      ? "path"
                           : o.addressing == Addressing::kVirtual ? "virtual"
                                                                  : "auto";
  return {{"SHARDGUARD_S3_ENDPOINT", o.endpoint},
          {"SHARDGUARD_S3_REGION", o.region},
          {"SHARDGUARD_S3_ADDRESSING", addressing},
          {"SHARDGUARD_S3_PART_SIZE", std::to_string(o.part_size)},
          {"SHARDGUARD_S3_READ_SIZE", std::to_string(o.read_size)},
          {"SHARDGUARD_S3_MAX_INFLIGHT", std::to_string(o.max_inflight)},
          {"SHARDGUARD_S3_REQUEST_TIMEOUT_MS", ms(o.request_timeout)},
          {"SHARDGUARD_S3_STALL_MS", ms(o.stall_time)},
          {"SHARDGUARD_S3_RETRIES", std::to_string(o.retries)},
          {"SHARDGUARD_S3_TLS_VERIFY", o.tls_verify ? "1" : "0"},
          {"SHARDGUARD_S3_ALLOW_HTTP", o.allow_http ? "1" : "0"},
          {"SHARDGUARD_S3_CA_FILE", o.ca_file}};
}

Result<S3Options> s3_options_from_env(
    const std::function<std::optional<std::string>(std::string_view)>& getenv, S3Options base) {
  S3Options o = std::move(base);
  auto number = [&](const char* var, uint64_t& out) -> Status {
    auto v = getenv(var);
    if (!v || v->empty()) return {};
    if (!all_digits(*v)) return invalid("environment", var, "'" + *v + "' is not a number");
    auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
    if (ec != std::errc()) return invalid("environment", var, "'" + *v + "' is out of range");
    return {};
  };
  auto flag = [&](const char* var, bool& out) -> Status {
    auto v = getenv(var);
    if (!v || v->empty()) return {};
    if (*v != "0" && *v != "1") return invalid("environment", var, "expected 0 or 1");
    out = *v == "1";
    return {};
  };
  if (auto v = getenv("SHARDGUARD_S3_ENDPOINT"); v && !v->empty()) o.endpoint = *v;
  if (auto v = getenv("SHARDGUARD_S3_REGION"); v && !v->empty()) o.region = *v;
  if (auto v = getenv("SHARDGUARD_S3_ADDRESSING"); v && !v->empty()) {
    if (*v == "path") o.addressing = Addressing::kPath;
    else if (*v == "virtual") o.addressing = Addressing::kVirtual;
    else if (*v != "auto")
      return invalid("environment", "SHARDGUARD_S3_ADDRESSING", "expected path, virtual or auto");
  }
  SG_RETURN_IF_ERROR(number("SHARDGUARD_S3_PART_SIZE", o.part_size));
  SG_RETURN_IF_ERROR(number("SHARDGUARD_S3_READ_SIZE", o.read_size));
  SG_RETURN_IF_ERROR(number("SHARDGUARD_S3_MAX_INFLIGHT", o.max_inflight));
  uint64_t ms = 0;
  SG_RETURN_IF_ERROR(number("SHARDGUARD_S3_REQUEST_TIMEOUT_MS", ms));
  if (ms > 0) o.request_timeout = std::chrono::milliseconds(ms);
  ms = 0;
  SG_RETURN_IF_ERROR(number("SHARDGUARD_S3_STALL_MS", ms));
  if (ms > 0) o.stall_time = std::chrono::milliseconds(ms);
  uint64_t retries = static_cast<uint64_t>(o.retries);
  SG_RETURN_IF_ERROR(number("SHARDGUARD_S3_RETRIES", retries));
  o.retries = static_cast<int>(std::min<uint64_t>(retries, 100));
  SG_RETURN_IF_ERROR(flag("SHARDGUARD_S3_TLS_VERIFY", o.tls_verify));
  SG_RETURN_IF_ERROR(flag("SHARDGUARD_S3_ALLOW_HTTP", o.allow_http));
  if (auto v = getenv("SHARDGUARD_S3_CA_FILE"); v && !v->empty()) o.ca_file = *v;
  return o;
}

}  // namespace shardguard::storage::s3
