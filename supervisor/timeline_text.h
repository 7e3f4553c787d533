// Timeline values written for people: durations in ms, s, min, h, d; GPU time; percentages;
// UTC times; and one line describing each kind of events.jsonl record. Numbers are written in
// fixed notation, never with an exponent; text that came from the file is escaped for the
// terminal (core/terminal_text.h), so a reason cannot forge a line.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "supervisor/timeline.h"

namespace shardguard::supervisor {

// `v` in fixed notation with at most `decimals` decimals, trailing zeros dropped ("0.25",
// "12", "-3.5"); "nan"/"inf" are never produced: non-finite values give "0".
std::string plain_number(double v, int decimals = 6);

// "250 ms", "4.2 s", "3.5 min", "2.1 h", "3.2 d".
std::string human_seconds(double seconds);
// GPU-seconds as "12.3 GPU-s", "4.5 GPU-min", "2.1 GPU-h".
std::string human_gpu_seconds(double gpu_seconds);
// "87.3 %" of a ratio in [0, 1].
std::string percent(double ratio);
// "2024-05-01 12:00:00.123" (UTC).
std::string utc_time(int64_t unix_ms);

// "aws-spot-interruption (aws spot-interruption, stop, 2.0 min left)": the notice's reason, then
// where it came from and what it asks. Escaped for the terminal.
std::string describe_notice(const NoticeView& notice);

// One line for `record`, e.g. "attempt 2: 3 ranks, resuming from step 300" or
// "step 600 committed in 120 ms (emergency)". Escaped for the terminal.
std::string describe_record(const TimelineRecord& record);

}  // namespace shardguard::supervisor
