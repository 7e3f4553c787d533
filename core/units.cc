#include "core/units.h"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

namespace shardguard {
namespace {

Error bad(std::string_view kind, std::string_view text, std::string_view why) {
  std::string msg = "invalid ";
  msg += kind;
  msg += " '";
  msg += text;
  msg += "': ";
  msg += why;
  return Error(ErrorCode::kInvalid, std::move(msg));
}

// Reads digits with an optional fraction; returns the count of characters read (0: none).
size_t read_number(std::string_view s, long double& out) {
  size_t i = 0;
  long double v = 0;
  bool digits = false;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    v = v * 10 + (s[i] - '0');
    ++i;
    digits = true;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    long double scale = 0.1L;
    bool frac_digits = false;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      v += (s[i] - '0') * scale;
      scale /= 10;
      ++i;
      frac_digits = true;
    }
    if (!frac_digits) return 0;
  }
  if (!digits) return 0;
  out = v;
  return i;
}

struct Unit {
  std::string_view name;
  long double factor;
};

}  // namespace

Result<std::chrono::nanoseconds> parse_duration(std::string_view text) {
  static constexpr std::array<Unit, 7> kUnits = {{{"ns", 1},
                                                  {"us", 1e3L},
                                                  {"ms", 1e6L},
                                                  {"s", 1e9L},
                                                  {"m", 60e9L},
                                                  {"h", 3600e9L},
                                                  {"d", 86400e9L}}};
  if (text.empty()) return bad("duration", text, "empty");
  if (text == "0") return std::chrono::nanoseconds(0);
  long double total = 0;
  long double last_factor = std::numeric_limits<long double>::infinity();
  std::string_view rest = text;
  while (!rest.empty()) {
    long double value = 0;
    size_t n = read_number(rest, value);
    if (n == 0) return bad("duration", text, "expected a number at '" + std::string(rest) + "'");
    rest.remove_prefix(n);
    size_t u = 0;
    while (u < rest.size() && std::isalpha(static_cast<unsigned char>(rest[u]))) ++u;
    std::string_view unit = rest.substr(0, u);
    if (unit.empty())
      return bad("duration", text, "missing unit (use ns, us, ms, s, m, h or d, e.g. '30s')");
    const Unit* found = nullptr;
    for (const auto& k : kUnits)
      if (k.name == unit) found = &k;
    if (found == nullptr)
      return bad("duration", text,
                 "unknown unit '" + std::string(unit) + "' (use ns, us, ms, s, m, h or d)");
    if (found->factor >= last_factor)
      return bad("duration", text, "units must go from largest to smallest, each once");
    last_factor = found->factor;
    total += value * found->factor;
    rest.remove_prefix(u);
  }
  if (total > static_cast<long double>(std::numeric_limits<int64_t>::max()))
    return bad("duration", text, "too large");
  return std::chrono::nanoseconds(static_cast<int64_t>(std::llround(total)));
}

Result<uint64_t> parse_size(std::string_view text) {
  static constexpr std::array<Unit, 11> kUnits = {{{"B", 1},
                                                   {"KB", 1e3L},
                                                   {"MB", 1e6L},
                                                   {"GB", 1e9L},
                                                   {"TB", 1e12L},
                                                   {"PB", 1e15L},
                                                   {"KiB", 1024.0L},
                                                   {"MiB", 1048576.0L},
                                                   {"GiB", 1073741824.0L},
                                                   {"TiB", 1099511627776.0L},
                                                   {"PiB", 1125899906842624.0L}}};
  if (text.empty()) return bad("size", text, "empty");
  long double value = 0;
  size_t n = read_number(text, value);
  if (n == 0) return bad("size", text, "expected a number first, e.g. '50GiB'");
  std::string_view unit = text.substr(n);
  long double factor = 1;
  if (!unit.empty()) {
    const Unit* found = nullptr;
    for (const auto& k : kUnits)
      if (k.name == unit) found = &k;
    if (found == nullptr)
      return bad("size", text,
                 "unknown unit '" + std::string(unit) +
                     "' (use B, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB or PiB)");
    factor = found->factor;
  } else if (text.find('.') != std::string_view::npos) {
    return bad("size", text, "a byte count must be a whole number");
  }
  long double bytes = value * factor;
  if (bytes >= 18446744073709551616.0L) return bad("size", text, "larger than 2^64 bytes");
  return static_cast<uint64_t>(bytes);
}

std::string format_duration(std::chrono::nanoseconds d) {
  using namespace std::chrono;
  char buf[64];
  const double secs = duration<double>(d).count();
  if (secs < 1e-3) {
    std::snprintf(buf, sizeof buf, "%.0fus", secs * 1e6);
  } else if (secs < 1) {
    std::snprintf(buf, sizeof buf, "%.0fms", secs * 1e3);
  } else if (secs < 60) {
    std::snprintf(buf, sizeof buf, "%.2fs", secs);
  } else if (secs < 3600) {
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(secs / 60),
                  static_cast<int>(secs) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(secs / 3600),
                  static_cast<int>(secs / 60) % 60);
  }
  return buf;
}

std::string format_size(uint64_t bytes) {
  static constexpr std::array<const char*, 6> kNames = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  size_t i = 0;
  while (v >= 1024 && i + 1 < kNames.size()) {
    v /= 1024;
    ++i;
  }
  char buf[32];
  if (i == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kNames[i]);
  return buf;
}

}  // namespace shardguard
