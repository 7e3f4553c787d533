// Parsing and printing of the time formats the metadata services use for deadlines:
// RFC 3339 (AWS spot instance-action and rebalance: "2017-09-18T08:22:00Z"), RFC 1123
// (Azure NotBefore: "Mon, 19 Sep 2016 18:29:47 GMT") and AWS scheduled-event times
// ("21 Jan 2019 09:00:43 GMT"). All UTC; no time-zone database is consulted.
// Pure functions, thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/result.h"

namespace shardguard::agent {

// "YYYY-MM-DDThh:mm:ss[.frac](Z|+hh:mm|-hh:mm)"; 't'/'z' accepted. kInvalid names the text.
Result<WallTime> parse_rfc3339(std::string_view text);

// "[Ddd, ]D[D] Mon YYYY hh:mm:ss GMT" (also "UTC"): covers Azure NotBefore and AWS
// scheduled-event NotBefore/NotAfter. The weekday, when present, is not cross-checked.
Result<WallTime> parse_http_date(std::string_view text);

// "2017-09-18T08:22:00Z" (whole seconds, truncated).
std::string format_rfc3339(WallTime t);
// "Mon, 19 Sep 2016 18:29:47 GMT".
std::string format_rfc1123(WallTime t);

}  // namespace shardguard::agent
