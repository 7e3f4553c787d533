// checkpoint/dir_identity.h: the directory remembers its job id; a run adopts it, matches
// it, or is refused naming both ids unless it takes the directory over on purpose.
#include "checkpoint/dir_identity.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>

#include "core/fault_fs.h"
#include "tests/checkpoint/step_fixture.h"
#include "tests/support/temp_dir.h"

namespace shardguard::checkpoint {
namespace {

using shardguard::testing::slurp;
using shardguard::testing::spit;
using shardguard::testing::TempDir;

const WallTime kNow = from_unix_ms(1'767'323'045'123);  // 2026-01-02T03:04:05.123Z
Filesystem& posix() { return PosixFilesystem::instance(); }
std::optional<std::string> none() { return std::nullopt; }

TEST_CASE("A fresh directory gets a generated id, not one from a run directory's name",
          "[identity]") {
  TempDir dir;
  auto r = resolve_job_id(posix(), dir.path(), none(), false, kNow);
  REQUIRE(r.ok());
  CHECK(r->source == JobIdSource::kGenerated);
  CHECK(std::regex_match(r->job_id, std::regex("job-20260102-030405-[0-9a-f]{8}")));
  CHECK(*stored_job_id(posix(), dir.path()) == r->job_id);
  // Two fresh directories at the same second still differ.
  TempDir other;
  CHECK(resolve_job_id(posix(), other.path(), none(), false, kNow)->job_id != r->job_id);

  // The next run without an explicit id adopts it, and nothing is rewritten.
  const std::string before = slurp(dir / ".shardguard/job.json");
  auto again = resolve_job_id(posix(), dir.path(), none(), false, kNow + std::chrono::hours(1));
  REQUIRE(again.ok());
  CHECK(again->source == JobIdSource::kAdopted);
  CHECK(again->job_id == r->job_id);
  CHECK(slurp(dir / ".shardguard/job.json") == before);
}

TEST_CASE("Explicit ids: stored when fresh, matched when equal, refused when different",
          "[identity]") {
  TempDir dir;
  auto stored = resolve_job_id(posix(), dir.path(), "llama-70b", false, kNow);
  REQUIRE(stored.ok());
  CHECK(stored->source == JobIdSource::kStored);
  CHECK(resolve_job_id(posix(), dir.path(), "llama-70b", false, kNow)->source ==
        JobIdSource::kMatched);
  CHECK(resolve_job_id(posix(), dir.path(), none(), false, kNow)->job_id == "llama-70b");

  auto refused = resolve_job_id(posix(), dir.path(), "mistral-7b", false, kNow);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code() == ErrorCode::kInvalid);
  const std::string& m = refused.error().message();
  CHECK_THAT(m, Catch::Contains("belongs to job 'llama-70b'"));
  CHECK_THAT(m, Catch::Contains("not 'mistral-7b'"));
  CHECK_THAT(m, Catch::Contains("--resume-from-job"));
  CHECK_THAT(m, Catch::Contains(dir.path()));
  CHECK(*stored_job_id(posix(), dir.path()) == "llama-70b");  // untouched

  SECTION("take_over records the change") {
    auto taken = resolve_job_id(posix(), dir.path(), "mistral-7b", true, kNow);
    REQUIRE(taken.ok());
    CHECK(taken->source == JobIdSource::kTakenOver);
    CHECK(taken->previous_job_id == "llama-70b");
    CHECK(*stored_job_id(posix(), dir.path()) == "mistral-7b");
    auto record = boost::json::parse(slurp(dir / ".shardguard/job.json")).as_object();
    auto& changes = record.at("changes").as_array();
    REQUIRE(changes.size() == 1);
    CHECK(changes[0].at("from").as_string() == "llama-70b");
    CHECK(changes[0].at("to").as_string() == "mistral-7b");
    CHECK(changes[0].at("unix_ms").to_number<int64_t>() == to_unix_ms(kNow));
    // The old id is now the one refused.
    CHECK_FALSE(resolve_job_id(posix(), dir.path(), "llama-70b", false, kNow).ok());
  }
  SECTION("decide_job_id writes nothing") {
    auto d = decide_job_id(posix(), dir.path(), "mistral-7b", true, kNow);
    REQUIRE(d.ok());
    CHECK(d->source == JobIdSource::kTakenOver);
    CHECK(*stored_job_id(posix(), dir.path()) == "llama-70b");
  }
}

TEST_CASE("A directory written before the record existed adopts its checkpoints' job id",
          "[identity]") {
  TempDir dir;
  FakeClock clock;
  REQUIRE(shardguard::testing::write_step(posix(), clock, dir.path(), 100, 1, {4, 4}).ok());
  auto r = resolve_job_id(posix(), dir.path(), none(), false, kNow);
  REQUIRE(r.ok());
  CHECK(r->source == JobIdSource::kFromCheckpoint);
  CHECK(r->job_id == "crash-job");  // what step_fixture writes
  CHECK(*stored_job_id(posix(), dir.path()) == "crash-job");
}

TEST_CASE("Job ids and records are checked strictly", "[identity]") {
  TempDir dir;
  auto bad = GENERATE(as<std::string>{}, "", "a b", "a/b", "tab\there", std::string(129, 'x'),
                      std::string("nul\0x", 5));
  INFO(bad);
  CHECK(resolve_job_id(posix(), dir.path(), bad, false, kNow).error().code() ==
        ErrorCode::kInvalid);
  CHECK(check_job_id("slurm-12345_job.x:y@z+1").ok());
  CHECK(check_job_id(std::string(128, 'x')).ok());

  std::filesystem::create_directories(dir / ".shardguard");
  spit(dir / ".shardguard/job.json", "{\"format\":\"shardguard-job\",\"version\":1}");
  auto corrupt = resolve_job_id(posix(), dir.path(), none(), false, kNow);
  REQUIRE_FALSE(corrupt.ok());
  CHECK(corrupt.error().code() == ErrorCode::kCorrupt);
  CHECK_THAT(corrupt.error().message(), Catch::Contains(dir / ".shardguard/job.json"));
}

TEST_CASE("Storing the id is atomic: a failed write leaves no record and no temp file",
          "[identity][fault]") {
  TempDir dir;
  FaultInjectingFilesystem fs(posix());
  fs.fail_nth_operation(3, ENOSPC);  // create_dirs, open temp, then the write fails
  auto r = resolve_job_id(fs, dir.path(), "job-a", false, kNow);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == ErrorCode::kNoSpace);
  CHECK_FALSE(stored_job_id(posix(), dir.path())->has_value());
  for (const auto& e : std::filesystem::directory_iterator(dir / ".shardguard"))
    FAIL("left behind: " << e.path());
}

}  // namespace
}  // namespace shardguard::checkpoint
