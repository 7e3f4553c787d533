// The quarantine's reason record, shared by a directory's reason file (quarantine.json inside
// the moved step) and a bucket's mark (quarantine/step-N-<time>.json). Internal to
// checkpoint/quarantine*.cc. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "checkpoint/quarantine.h"
#include "core/result.h"

namespace shardguard::checkpoint::quarantine_detail {

// Same-millisecond quarantines of one step are numbered; more than this is a bug.
inline constexpr uint32_t kMaxSeq = 1000;

// "pid P on host H".
std::string default_who();
// The record of `e` (step, reason, time, who; with `bucket` also attempts and manifest).
std::string reason_json(const QuarantineEntry& e, bool bucket);
// Fills e's reason and who (and a mark's attempts and manifest) from `text`; strict. kCorrupt
// names `path`.
Status parse_reason(std::string_view text, const std::string& path, QuarantineEntry& e);
std::string q(const std::string& s);

}  // namespace shardguard::checkpoint::quarantine_detail
