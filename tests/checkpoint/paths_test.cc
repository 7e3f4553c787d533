// checkpoint/paths.h: tables of good and bad names. Recovery parses names instead of
// trusting them, so every bad form must be refused.
#include "checkpoint/paths.h"

#include <catch2/catch.hpp>

namespace shardguard::checkpoint {
namespace {

// 2026-01-02T03:04:05.123Z
constexpr int64_t kT = 1767323045123;

TEST_CASE("Step directory names round-trip and refuse near misses", "[paths]") {
  CHECK(step_dir_name(1200) == "step-000001200");
  CHECK(step_dir_name(12345678901ull) == "step-12345678901");
  CHECK(parse_step_dir_name("step-000001200") == 1200u);
  auto bad = GENERATE(as<std::string>{}, "step-12", "step-", "step-00000120a", "Step-000001200",
                      "step-000001200-20260102T030405.123Z", "quarantine", ".shardguard",
                      "step--00001200", "step-+00001200");
  INFO(bad);
  CHECK_FALSE(parse_step_dir_name(bad).has_value());
}

TEST_CASE("Quarantine names carry step, UTC time to the millisecond and a sequence", "[paths]") {
  CHECK(quarantine_dir_name({1200, kT, 1}) == "step-000001200-20260102T030405.123Z");
  CHECK(quarantine_dir_name({1200, kT, 2}) == "step-000001200-20260102T030405.123Z-2");
  CHECK(quarantine_dir_name({7, 0, 1}) == "step-000000007-19700101T000000.000Z");

  for (const QuarantineName& q : {QuarantineName{1200, kT, 1}, QuarantineName{1200, kT, 17},
                                  QuarantineName{0, 951782400999, 1},  // 2000-02-29
                                  QuarantineName{99999999999ull, kT + 86'400'000, 3}}) {
    auto parsed = parse_quarantine_dir_name(quarantine_dir_name(q));
    INFO(quarantine_dir_name(q));
    REQUIRE(parsed.has_value());
    CHECK(parsed->step == q.step);
    CHECK(parsed->unix_ms == q.unix_ms);
    CHECK(parsed->seq == q.seq);
  }
}

TEST_CASE("Quarantine names that are not ours are refused", "[paths]") {
  auto bad =
      GENERATE(as<std::string>{},
               "step-000001200",                         // a live step, not quarantined
               "step-000001200-",                        //
               "step-000001200-20260102T030405Z",        // no milliseconds
               "step-000001200-20260102T030405.123",     // no Z
               "step-000001200-20260102 030405.123Z",    // no T
               "step-000001200-20261302T030405.123Z",    // month 13
               "step-000001200-20260230T030405.123Z",    // 30 February
               "step-000001200-20260102T240405.123Z",    // hour 24
               "step-000001200-20260102T030460.123Z",    // second 60
               "step-000001200-20260102T030405.123Z-1",  // seq 1 is written without
               "step-000001200-20260102T030405.123Z-02", "step-000001200-20260102T030405.123Z-",
               "step-000001200-20260102T030405.123Z-x",
               "step-12-20260102T030405.123Z",  // short step
               "step-000001200-2026010T2030405.123Z", "quarantine.json", "");
  INFO(bad);
  CHECK_FALSE(parse_quarantine_dir_name(bad).has_value());
}

TEST_CASE("The directory's own records live under .shardguard", "[paths]") {
  CHECK(meta_dir("/ck") == "/ck/.shardguard");
  CHECK(meta_path("/ck", kLeaseRecordName) == "/ck/.shardguard/lease");
  CHECK(meta_path("/ck/", kLeaseLockName) == "/ck/.shardguard/lease.lock");
  CHECK(meta_path("ck", kJobIdentityName) == "ck/.shardguard/job.json");
  CHECK(meta_path("ck", kDirHistoryName) == "ck/.shardguard/history.json");
  CHECK(quarantine_root("/ck") == "/ck/quarantine");
  // None of them can be taken for a step, a shard or a sidecar.
  for (std::string_view name :
       {kQuarantineDirName, kMetaDirName, kQuarantineReasonName, kLeaseLockName, kLeaseRecordName,
        kJobIdentityName, kDirHistoryName, kDirHistoryCorruptName}) {
    INFO(name);
    CHECK_FALSE(parse_step_dir_name(name).has_value());
    CHECK_FALSE(parse_shard_file_name(name).has_value());
    CHECK_FALSE(parse_sidecar_name(name).has_value());
    CHECK_FALSE(is_temp_name(name));
  }
}

}  // namespace
}  // namespace shardguard::checkpoint
