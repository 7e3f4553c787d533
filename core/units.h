// Human-written durations ("90s", "5m", "1h30m", "250ms") and sizes ("50GiB", "5GB",
// "4096") as used in config files and flags, parsed strictly: an error names the text
// and what is wrong with it. Pure functions, thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"

namespace shardguard {

// Units: ns, us, ms, s, m, h, d; parts may be combined largest first ("1h30m").
// A bare number is refused (ambiguous); "0" alone is allowed and means zero.
Result<std::chrono::nanoseconds> parse_duration(std::string_view text);

// Units: B, KB/MB/GB/TB/PB (powers of 1000), KiB/MiB/GiB/TiB/PiB (powers of 1024), or a
// bare byte count. Fractions are allowed ("1.5GiB") when they come to whole bytes after
// rounding down. Overflow of 64 bits is an error.
Result<uint64_t> parse_size(std::string_view text);

// "1h2m3.5s"-style rendering for logs and tables.
std::string format_duration(std::chrono::nanoseconds d);
// "1.50 GiB"-style rendering.
std::string format_size(uint64_t bytes);

}  // namespace shardguard
