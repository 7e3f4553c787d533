#include "checkpoint/paths.h"

#include <charconv>
#include <cstdio>

namespace shardguard::checkpoint {
namespace {

// Parses exactly `digits`..max digits of a decimal number filling all of `text`.
template <typename T>
std::optional<T> parse_number(std::string_view text, size_t min_digits) {
  if (text.size() < min_digits || text.size() > 20) return std::nullopt;
  for (char c : text)
    if (c < '0' || c > '9') return std::nullopt;
  T value{};
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

bool consume(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}

}  // namespace

std::string step_dir_name(uint64_t step) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "step-%09llu", static_cast<unsigned long long>(step));
  return buf;
}

std::optional<uint64_t> parse_step_dir_name(std::string_view name) {
  if (!consume(name, "step-")) return std::nullopt;
  return parse_number<uint64_t>(name, 9);
}

std::string shard_file_name(uint32_t rank, uint32_t world_size) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "shard-%05u-of-%05u.safetensors", rank, world_size);
  return buf;
}

std::optional<ShardName> parse_shard_file_name(std::string_view name) {
  if (!consume(name, "shard-")) return std::nullopt;
  auto of = name.find("-of-");
  if (of == std::string_view::npos) return std::nullopt;
  auto rank = parse_number<uint32_t>(name.substr(0, of), 5);
  name.remove_prefix(of + 4);
  if (!name.ends_with(".safetensors")) return std::nullopt;
  auto world = parse_number<uint32_t>(name.substr(0, name.size() - 12), 5);
  if (!rank || !world || *world == 0 || *rank >= *world) return std::nullopt;
  return ShardName{*rank, *world};
}

std::string sidecar_name(uint32_t rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05u.json", rank);
  return buf;
}

std::optional<uint32_t> parse_sidecar_name(std::string_view name) {
  if (!consume(name, "rank-") || !name.ends_with(".json")) return std::nullopt;
  return parse_number<uint32_t>(name.substr(0, name.size() - 5), 5);
}

std::string temp_name(std::string_view final_name, uint64_t attempt, int pid) {
  return std::string(final_name) + ".tmp.a" + std::to_string(attempt) + "." +
         std::to_string(pid);
}

bool is_temp_name(std::string_view name) { return name.find(".tmp.") != std::string_view::npos; }

bool is_safe_relative_path(std::string_view path) {
  if (path.empty() || path.front() == '/') return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  for (char c : path)
    if (c == '\\' || c == '\0') return false;
  return true;
}

}  // namespace shardguard::checkpoint
