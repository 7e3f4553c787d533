#include "core/time_formats.h"

#include <array>
#include <cctype>
#include <cstdio>

namespace shardguard {

namespace {

using namespace std::chrono;

constexpr std::array<std::string_view, 12> kMonths = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
constexpr std::array<std::string_view, 7> kWeekdays = {"Sun", "Mon", "Tue", "Wed",
                                                       "Thu", "Fri", "Sat"};

// A cursor over the text that reads fixed-width fields.
struct Cursor {
  std::string_view s;
  size_t i = 0;

  bool done() const { return i == s.size(); }
  bool digits(int n, int& out) {
    out = 0;
    for (int k = 0; k < n; ++k, ++i) {
      if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
      out = out * 10 + (s[i] - '0');
    }
    return true;
  }
  bool literal(char c) { return i < s.size() && s[i] == c ? (++i, true) : false; }
  bool one_of(std::string_view chars) {
    return i < s.size() && chars.find(s[i]) != std::string_view::npos ? (++i, true) : false;
  }
};

Error bad_time(std::string_view text, std::string_view format) {
  return Error(ErrorCode::kInvalid, "time '" + std::string(text) + "': not " + std::string(format));
}

// `t` (seconds since the epoch) within the clamp range, offset by `frac` and `offset`: the
// sum is formed in seconds first, where years 0000-9999 cannot overflow.
WallTime clamped(sys_seconds t, Duration frac = Duration::zero(), minutes offset = minutes(0)) {
  t -= offset;
  const int64_t s = t.time_since_epoch().count();
  if (s >= kLatestParsedUnixSeconds) return WallTime(seconds(kLatestParsedUnixSeconds));
  if (s <= kEarliestParsedUnixSeconds) return WallTime(seconds(kEarliestParsedUnixSeconds));
  return WallTime(t.time_since_epoch()) + frac;
}

// Checks the calendar fields and turns them into a UTC time in seconds.
bool to_time(int y, int mo, int d, int h, int mi, int s, sys_seconds& out) {
  const year_month_day ymd{year(y), month(static_cast<unsigned>(mo)),
                           day(static_cast<unsigned>(d))};
  if (!ymd.ok() || h > 23 || mi > 59 || s > 60) return false;  // 60: a leap second
  out = sys_days(ymd) + hours(h) + minutes(mi) + seconds(s);
  return true;
}

}  // namespace

Result<WallTime> parse_rfc3339(std::string_view text) {
  Cursor c{text};
  int y, mo, d, h, mi, s;
  if (!(c.digits(4, y) && c.literal('-') && c.digits(2, mo) && c.literal('-') && c.digits(2, d) &&
        c.one_of("Tt ") && c.digits(2, h) && c.literal(':') && c.digits(2, mi) && c.literal(':') &&
        c.digits(2, s))) {
    return bad_time(text, "RFC 3339");
  }
  Duration frac{0};
  if (c.literal('.')) {
    int64_t scale = 100'000'000;  // ns per first fractional digit
    size_t n = 0;
    while (!c.done() && std::isdigit(static_cast<unsigned char>(c.s[c.i]))) {
      frac += Duration((c.s[c.i++] - '0') * scale);
      scale /= 10;
      ++n;
    }
    if (n == 0) return bad_time(text, "RFC 3339");
  }
  minutes offset{0};
  if (!c.one_of("Zz")) {
    const bool plus = c.literal('+');
    if (!plus && !c.literal('-')) return bad_time(text, "RFC 3339");
    int oh, om;
    if (!(c.digits(2, oh) && c.literal(':') && c.digits(2, om)) || oh > 23 || om > 59) {
      return bad_time(text, "RFC 3339");
    }
    offset = (plus ? 1 : -1) * (hours(oh) + minutes(om));
  }
  sys_seconds t;
  if (!c.done() || !to_time(y, mo, d, h, mi, s, t)) return bad_time(text, "RFC 3339");
  return clamped(t, frac, offset);
}

Result<WallTime> parse_http_date(std::string_view text) {
  Cursor c{text};
  for (auto wd : kWeekdays) {
    if (text.substr(0, 4) == std::string(wd) + ",") {
      c.i = 4;
      while (c.literal(' ')) {
      }
      break;
    }
  }
  int d, y, h, mi, s;
  if (!c.digits(1, d)) return bad_time(text, "an HTTP date");
  if (int d2; !c.done() && std::isdigit(static_cast<unsigned char>(c.s[c.i]))) {
    c.digits(1, d2);
    d = d * 10 + d2;
  }
  if (!c.literal(' ') || c.i + 3 > text.size()) return bad_time(text, "an HTTP date");
  int mo = 0;
  for (size_t k = 0; k < kMonths.size(); ++k) {
    if (text.substr(c.i, 3) == kMonths[k]) mo = static_cast<int>(k) + 1;
  }
  c.i += 3;
  if (!(mo > 0 && c.literal(' ') && c.digits(4, y) && c.literal(' ') && c.digits(2, h) &&
        c.literal(':') && c.digits(2, mi) && c.literal(':') && c.digits(2, s) && c.literal(' '))) {
    return bad_time(text, "an HTTP date");
  }
  const std::string_view zone = text.substr(c.i);
  sys_seconds t;
  if ((zone != "GMT" && zone != "UTC") || !to_time(y, mo, d, h, mi, s, t)) {
    return bad_time(text, "an HTTP date");
  }
  return clamped(t);
}

std::string format_rfc3339(WallTime t) {
  const auto day_point = floor<days>(t);
  const year_month_day ymd(day_point);
  const hh_mm_ss hms(floor<seconds>(t - day_point));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04d-%02u-%02uT%02d:%02d:%02dZ", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                static_cast<int>(hms.hours().count()), static_cast<int>(hms.minutes().count()),
                static_cast<int>(hms.seconds().count()));
  return buf;
}

std::string format_rfc1123(WallTime t) {
  const auto day_point = floor<days>(t);
  const year_month_day ymd(day_point);
  const weekday wd(day_point);
  const hh_mm_ss hms(floor<seconds>(t - day_point));
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s, %02u %s %04d %02d:%02d:%02d GMT",
                std::string(kWeekdays[wd.c_encoding()]).c_str(), static_cast<unsigned>(ymd.day()),
                std::string(kMonths[static_cast<unsigned>(ymd.month()) - 1]).c_str(),
                static_cast<int>(ymd.year()), static_cast<int>(hms.hours().count()),
                static_cast<int>(hms.minutes().count()), static_cast<int>(hms.seconds().count()));
  return buf;
}

}  // namespace shardguard
