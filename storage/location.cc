#include "storage/location.h"

#include <algorithm>
#include <cctype>
#include <optional>

namespace shardguard::storage {
namespace {

Error invalid(std::string_view text, const std::string& why) {
  return Error(ErrorCode::kInvalid, "checkpoint location '" + std::string(text) + "': " + why);
}

// S3's rules for bucket names that work with both path and virtual-host addressing:
// 3-63 characters of lower-case letters, digits, '.' and '-', starting and ending with a
// letter or digit, no "..", not an IP address.
std::optional<std::string> bucket_problem(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return "a bucket name has 3 to 63 characters";
  for (char c : b)
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) ||
          c == '.' || c == '-'))
      return "a bucket name holds only lower-case letters, digits, '.' and '-'";
  auto alnum = [](char c) {
    return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c));
  };
  if (!alnum(b.front()) || !alnum(b.back()))
    return "a bucket name starts and ends with a letter or digit";
  if (b.find("..") != std::string_view::npos) return "a bucket name has no \"..\"";
  if (std::all_of(b.begin(), b.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) || c == '.';
      }))
    return "a bucket name is not an IP address";
  return std::nullopt;
}

std::optional<std::string> prefix_problem(std::string_view p) {
  if (p.size() > 512) return "the prefix is longer than 512 characters";
  size_t start = 0;
  while (start <= p.size()) {
    const size_t end = std::min(p.find('/', start), p.size());
    const std::string_view part = p.substr(start, end - start);
    if (part.empty()) return "the prefix has an empty component (\"//\")";
    if (part == "." || part == "..") return "the prefix has a \".\" or \"..\" component";
    start = end + 1;
  }
  for (unsigned char c : p)
    if (c < 0x20 || c == 0x7f || c == '\\') return "the prefix holds a control character or '\\'";
  return std::nullopt;
}

}  // namespace

bool is_bucket_url(std::string_view text) { return text.starts_with(kS3Scheme); }

Result<Location> Location::parse(std::string_view text) {
  if (text.empty()) return invalid(text, "empty");
  if (!is_bucket_url(text)) {
    const auto scheme = text.find("://");
    if (scheme != std::string_view::npos && text.find('/') > scheme)
      return invalid(text, "only directories and s3://BUCKET/PREFIX are checkpoint locations");
    for (unsigned char c : text)
      if (c == 0) return invalid(text, "the path holds a NUL byte");
    return directory(std::string(text));
  }
  std::string_view rest = text.substr(kS3Scheme.size());
  while (rest.ends_with('/')) rest.remove_suffix(1);
  const auto slash = rest.find('/');
  Location loc;
  loc.kind = Kind::kBucket;
  loc.bucket = std::string(rest.substr(0, slash));
  if (loc.bucket.empty()) return invalid(text, "no bucket name after s3://");
  if (auto why = bucket_problem(loc.bucket)) return invalid(text, *why);
  if (slash != std::string_view::npos) {
    loc.prefix = std::string(rest.substr(slash + 1));
    if (auto why = prefix_problem(loc.prefix)) return invalid(text, *why);
  }
  return loc;
}

Location Location::directory(std::string path) {
  Location loc;
  loc.kind = Kind::kDirectory;
  loc.path = std::move(path);
  return loc;
}

std::string Location::str() const {
  if (!is_bucket()) return path;
  std::string out = std::string(kS3Scheme) + bucket;
  if (!prefix.empty()) out += "/" + prefix;
  return out;
}

std::string Location::describe(std::string_view key) const {
  std::string base = str();
  if (key.empty()) return base;
  if (!base.empty() && base.back() != '/') base += '/';
  return base + std::string(key);
}

std::string Location::object_key(std::string_view key) const {
  if (prefix.empty()) return std::string(key);
  if (key.empty()) return prefix;
  return prefix + "/" + std::string(key);
}

Result<std::string> key_within(const Location& location, std::string_view full) {
  std::string base = location.str();
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  if (full.size() > base.size() + 1 && full.starts_with(base) && full[base.size()] == '/')
    return std::string(full.substr(base.size() + 1));
  return Error(ErrorCode::kInvalid, "'" + std::string(full) + "' is not under the checkpoint location '" +
                                        location.str() + "'");
}

}  // namespace shardguard::storage
