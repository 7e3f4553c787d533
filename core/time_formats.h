// Parsing and printing of the time formats the metadata services (and S3's Date and
// Last-Modified headers) use:
// RFC 3339 (AWS spot instance-action and rebalance: "2017-09-18T08:22:00Z"), RFC 1123
// (Azure NotBefore: "Mon, 19 Sep 2016 18:29:47 GMT") and AWS scheduled-event times
// ("21 Jan 2019 09:00:43 GMT"). All UTC; no time-zone database is consulted.
// Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/result.h"

namespace shardguard {

// The range a parsed time is clamped to. A WallTime is int64 nanoseconds (1677-09-21 to
// 2262-04-11): a notice time past that wrapped, and "9999-12-31" became a deadline in the
// past, i.e. "now" - no time for a checkpoint. Clamped a few months inside the range, so the
// deadline arithmetic done on a notice (minus a margin, plus a grace) stays in it too.
inline constexpr int64_t kLatestParsedUnixSeconds = 9'214'646'400;     // 2262-01-01T00:00:00Z
inline constexpr int64_t kEarliestParsedUnixSeconds = -9'183'024'000;  // 1679-01-01T00:00:00Z

// "YYYY-MM-DDThh:mm:ss[.frac](Z|+hh:mm|-hh:mm)"; 't'/'z' accepted. kInvalid names the text.
// Times outside [kEarliestParsedUnixSeconds, kLatestParsedUnixSeconds] are clamped to it.
Result<WallTime> parse_rfc3339(std::string_view text);

// "[Ddd, ]D[D] Mon YYYY hh:mm:ss GMT" (also "UTC"): covers Azure NotBefore and AWS
// scheduled-event NotBefore/NotAfter. The weekday, when present, is not cross-checked.
// Clamped like parse_rfc3339.
Result<WallTime> parse_http_date(std::string_view text);

// "2017-09-18T08:22:00Z" (whole seconds, truncated).
std::string format_rfc3339(WallTime t);
// "Mon, 19 Sep 2016 18:29:47 GMT".
std::string format_rfc1123(WallTime t);

}  // namespace shardguard
