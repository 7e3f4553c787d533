#include "checkpoint/paths.h"

#include <charconv>
#include <chrono>
#include <cstdio>

#include "core/filesystem.h"

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

std::string meta_dir(const std::string& checkpoint_dir) {
  return join_path(checkpoint_dir, std::string(kMetaDirName));
}

std::string meta_path(const std::string& checkpoint_dir, std::string_view name) {
  return join_path(meta_dir(checkpoint_dir), std::string(name));
}

std::string quarantine_root(const std::string& checkpoint_dir) {
  return join_path(checkpoint_dir, std::string(kQuarantineDirName));
}

std::string quarantine_dir_name(const QuarantineName& q) {
  using namespace std::chrono;
  const sys_time<milliseconds> t{milliseconds(q.unix_ms)};
  const auto day = floor<days>(t);
  const year_month_day ymd{day};
  const hh_mm_ss hms{t - day};
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s-%04d%02u%02uT%02lld%02lld%02lld.%03lldZ",
                step_dir_name(q.step).c_str(), static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                static_cast<long long>(hms.hours().count()),
                static_cast<long long>(hms.minutes().count()),
                static_cast<long long>(hms.seconds().count()),
                static_cast<long long>(hms.subseconds().count()));
  std::string out = buf;
  if (q.seq > 1) out += "-" + std::to_string(q.seq);
  return out;
}

std::optional<QuarantineName> parse_quarantine_dir_name(std::string_view name) {
  using namespace std::chrono;
  if (!consume(name, "step-")) return std::nullopt;
  const auto dash = name.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  auto step = parse_number<uint64_t>(name.substr(0, dash), 9);
  name.remove_prefix(dash + 1);
  // YYYYMMDDTHHMMSS.mmmZ: exactly 20 characters, then optionally "-<seq>".
  if (!step || name.size() < 20 || name[8] != 'T' || name[15] != '.' || name[19] != 'Z')
    return std::nullopt;
  auto field = [&](size_t at, size_t len) { return parse_number<unsigned>(name.substr(at, len), len); };
  auto y = field(0, 4), mo = field(4, 2), d = field(6, 2), h = field(9, 2), mi = field(11, 2),
       sec = field(13, 2), ms = field(16, 3);
  if (!y || !mo || !d || !h || !mi || !sec || !ms) return std::nullopt;
  const year_month_day ymd{year(static_cast<int>(*y)), month(*mo), day(*d)};
  if (!ymd.ok() || *h > 23 || *mi > 59 || *sec > 59) return std::nullopt;
  QuarantineName q;
  q.step = *step;
  const auto t = sys_days(ymd) + hours(*h) + minutes(*mi) + seconds(*sec) + milliseconds(*ms);
  q.unix_ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
  std::string_view rest = name.substr(20);
  if (!rest.empty()) {
    if (!consume(rest, "-")) return std::nullopt;
    auto seq = parse_number<uint32_t>(rest, 1);
    if (!seq || *seq < 2 || rest.front() == '0') return std::nullopt;
    q.seq = *seq;
  }
  return q;
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

std::string step_key(uint64_t step) { return step_dir_name(step); }

std::string step_file_key(uint64_t step, std::string_view file) {
  return step_dir_name(step) + "/" + std::string(file);
}

std::string manifest_key(uint64_t step) { return step_file_key(step, kManifestName); }

std::string meta_key(std::string_view name) {
  return std::string(kMetaDirName) + "/" + std::string(name);
}

std::string attempt_dir_name(uint64_t attempt) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "a%06llu", static_cast<unsigned long long>(attempt));
  return buf;
}

std::optional<uint64_t> parse_attempt_dir_name(std::string_view name) {
  if (!consume(name, "a")) return std::nullopt;
  return parse_number<uint64_t>(name, 6);
}

std::string RankFiles::shard(uint32_t rank, uint32_t world_size, uint64_t attempt) const {
  const std::string name = shard_file_name(rank, world_size);
  return per_attempt ? attempt_dir_name(attempt) + "/" + name : name;
}

std::string RankFiles::sidecar(uint32_t rank, uint64_t attempt) const {
  const std::string name = sidecar_name(rank);
  return per_attempt ? attempt_dir_name(attempt) + "/" + name : name;
}

std::string quarantine_marker_key(const QuarantineName& q) {
  return std::string(kQuarantineDirName) + "/" + quarantine_dir_name(q) + ".json";
}

std::optional<QuarantineName> parse_quarantine_marker_name(std::string_view name) {
  if (!name.ends_with(".json")) return std::nullopt;
  name.remove_suffix(5);
  return parse_quarantine_dir_name(name);
}

}  // namespace shardguard::checkpoint
