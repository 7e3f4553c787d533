#include "agent/health/memory_check.h"

#include <charconv>
#include <cstdio>

#include "core/units.h"

namespace shardguard::agent {

namespace {

std::string_view next_line(std::string_view& text) {
  const auto nl = text.find('\n');
  std::string_view line = text.substr(0, nl);
  text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
  return line;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

template <typename T>
bool parse_number(std::string_view s, T& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

std::string percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", v);
  return buf;
}

}  // namespace

Result<MemInfo> parse_meminfo(std::string_view text) {
  bool have_total = false, have_available = false;
  uint64_t total = 0, available = 0, free = 0, buffers = 0, cached = 0;
  while (!text.empty()) {
    std::string_view line = next_line(text);
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, colon);
    std::string_view value = trim(line.substr(colon + 1));
    if (value.size() > 3 && value.substr(value.size() - 3) == " kB") value.remove_suffix(3);
    uint64_t* slot = key == "MemTotal"       ? &total
                     : key == "MemAvailable" ? &available
                     : key == "MemFree"      ? &free
                     : key == "Buffers"      ? &buffers
                     : key == "Cached"       ? &cached
                                             : nullptr;
    if (slot == nullptr) continue;
    if (!parse_number(trim(value), *slot))
      return Error(ErrorCode::kInvalid, "meminfo: bad value for " + std::string(key));
    have_total |= key == "MemTotal";
    have_available |= key == "MemAvailable";
  }
  if (!have_total || total == 0) return Error(ErrorCode::kInvalid, "meminfo: no MemTotal");
  return MemInfo{total, have_available ? available : free + buffers + cached};
}

Result<MemoryPressure> parse_psi(std::string_view text) {
  std::optional<PsiAverages> some, full;
  while (!text.empty()) {
    std::string_view line = trim(next_line(text));
    const auto space = line.find(' ');
    const std::string_view kind = line.substr(0, space);
    if (space == std::string_view::npos || (kind != "some" && kind != "full")) continue;
    PsiAverages avg;
    std::string_view rest = line.substr(space + 1);
    while (!rest.empty()) {
      const auto sp = rest.find(' ');
      const std::string_view field = rest.substr(0, sp);
      rest = sp == std::string_view::npos ? std::string_view() : trim(rest.substr(sp + 1));
      const auto eq = field.find('=');
      if (eq == std::string_view::npos) continue;
      const std::string_view k = field.substr(0, eq), v = field.substr(eq + 1);
      bool ok = true;
      if (k == "avg10")
        ok = parse_number(v, avg.avg10);
      else if (k == "avg60")
        ok = parse_number(v, avg.avg60);
      else if (k == "avg300")
        ok = parse_number(v, avg.avg300);
      else if (k == "total")
        ok = parse_number(v, avg.total_us);
      if (!ok) return Error(ErrorCode::kInvalid, "pressure: bad " + std::string(field));
    }
    (kind == "some" ? some : full) = avg;
  }
  if (!some) return Error(ErrorCode::kInvalid, "pressure: no 'some' line");
  return MemoryPressure{*some, full};
}

MemoryCheck::MemoryCheck(MemoryCheckConfig config, Filesystem& fs)
    : config_(std::move(config)), fs_(fs) {}

void MemoryCheck::run(Done done) {
  auto text = fs_.read_file(config_.meminfo_path);
  if (!text.ok()) return done(not_available_finding("memory", text.error().message()));
  auto info = parse_meminfo(*text);
  if (!info.ok()) return done(not_available_finding("memory", info.error().message()));
  FindingBuilder out("memory");
  const double fraction =
      static_cast<double>(info->available_kib) / static_cast<double>(info->total_kib);
  const std::string avail = format_size(info->available_kib * 1024) + " of " +
                            format_size(info->total_kib * 1024) + " available";
  if (fraction < config_.min_available_fraction) {
    out.add(HealthFinding::kWarning,
            avail + " (below " + percent(config_.min_available_fraction * 100) + ")");
  }
  if (config_.max_psi_some_avg10 > 0 && !config_.psi_path.empty()) {
    auto psi_text = fs_.read_file(config_.psi_path);  // absent without CONFIG_PSI: skip
    if (psi_text.ok()) {
      auto psi = parse_psi(*psi_text);
      if (psi.ok() && psi->some.avg10 > config_.max_psi_some_avg10) {
        out.add(HealthFinding::kWarning, "memory pressure: some avg10=" + percent(psi->some.avg10) +
                                             " (above " + percent(config_.max_psi_some_avg10) +
                                             ")");
      }
    }
  }
  done(out.finish(avail));
}

}  // namespace shardguard::agent
