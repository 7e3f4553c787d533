// checkpoint/lease.h in one process, time as an argument: refusal names the holder; a live
// flock is never stale (unless the multi-node setting says so); without flock the renewed
// timestamp alone decides, and a log line says so; a holder that lost its lease learns it
// at its next renewal.
#include "checkpoint/lease.h"

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <sstream>

#include "checkpoint/paths.h"
#include "core/fault_fs.h"
#include "tests/support/temp_dir.h"

namespace shardguard::checkpoint {
namespace {

using namespace std::chrono_literals;
using shardguard::testing::slurp;
using shardguard::testing::spit;
using shardguard::testing::TempDir;
namespace stdfs = std::filesystem;

const WallTime kT0 = from_unix_ms(1'767'323'045'000);

Filesystem& posix() { return PosixFilesystem::instance(); }

LeaseOwner owner(const std::string& job, int64_t pid = 1000, uint64_t epoch = 0) {
  LeaseOwner o = this_process_owner(job, epoch);
  o.pid = pid;
  return o;
}

// Captures what spdlog says while it lives.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

TEST_CASE("A lease is taken, refused to a second job naming the holder, and released", "[lease]") {
  TempDir dir;
  auto first = DirectoryLease::acquire(posix(), dir.path(), owner("job-a", 4242, 3), kT0);
  REQUIRE(first.ok());
  CHECK(first->holds_flock());
  CHECK(first->timestamp_only_reason().empty());
  CHECK_FALSE(first->took_over_from().has_value());
  CHECK(stdfs::exists(dir / ".shardguard/lease.lock"));

  auto record = read_lease(posix(), dir.path());
  REQUIRE(record.ok());
  REQUIRE(record->has_value());
  CHECK((*record)->owner.job_id == "job-a");
  CHECK((*record)->owner.pid == 4242);
  CHECK((*record)->owner.epoch == 3);
  CHECK((*record)->owner.host == this_process_owner("", 0).host);
  CHECK((*record)->renewed_unix_ms == to_unix_ms(kT0));
  CHECK((*record)->holds_flock);
  CHECK((*record)->token.size() == 32);

  // Another job (an open file of its own, even in this process) is refused, however late.
  auto second = DirectoryLease::acquire(posix(), dir.path(), owner("job-b"), kT0 + 1h);
  REQUIRE_FALSE(second.ok());
  CHECK(second.error().code() == ErrorCode::kFenced);
  const std::string& m = second.error().message();
  CHECK_THAT(m, Catch::Contains("job 'job-a'"));
  CHECK_THAT(m, Catch::Contains("pid 4242"));
  CHECK_THAT(m, Catch::Contains("host " + this_process_owner("", 0).host));
  CHECK_THAT(m, Catch::Contains("epoch 3"));
  CHECK_THAT(m, Catch::Contains("last renewed 1h00m ago"));
  CHECK_THAT(m, Catch::Contains("flock"));
  CHECK_THAT(m, Catch::Contains(dir.path()));

  SECTION("renew and set_epoch rewrite the record") {
    REQUIRE(first->renew(kT0 + 2s).ok());
    CHECK((*read_lease(posix(), dir.path()))->renewed_unix_ms == to_unix_ms(kT0 + 2s));
    REQUIRE(first->set_epoch(4, kT0 + 3s).ok());
    CHECK((*read_lease(posix(), dir.path()))->owner.epoch == 4);
  }
  SECTION("release removes the record and frees the lock at once") {
    REQUIRE(first->release().ok());
    CHECK_FALSE(read_lease(posix(), dir.path())->has_value());
    CHECK(first->release().ok());  // idempotent
    auto third = DirectoryLease::acquire(posix(), dir.path(), owner("job-b"), kT0);
    REQUIRE(third.ok());
    CHECK_FALSE(third->took_over_from().has_value());
    CHECK(first->renew(kT0).error().code() == ErrorCode::kInvalid);
  }
  SECTION("destroying the lease releases it") {
    { DirectoryLease gone = std::move(first).value(); }
    CHECK(DirectoryLease::acquire(posix(), dir.path(), owner("job-b"), kT0).ok());
  }
}

TEST_CASE("Without flock the renewed timestamp decides, and a log line says so", "[lease]") {
  TempDir dir;
  FaultInjectingFilesystem fs(posix());
  const int err = GENERATE(ENOLCK, EOPNOTSUPP);
  fs.set_lock_errno(err);
  LogCapture log;
  const LeaseOptions options{3s, true};

  auto a = DirectoryLease::acquire(fs, dir.path(), owner("job-a", 11), kT0, options);
  REQUIRE(a.ok());
  CHECK_FALSE(a->holds_flock());
  CHECK_THAT(a->timestamp_only_reason(), Catch::Contains("flock is not available"));
  CHECK_THAT(log.text(),
             Catch::Contains("lease: flock is not available on '" + dir.path() + "/.shardguard'"));
  CHECK_THAT(log.text(), Catch::Contains("renewed timestamps alone"));
  CHECK_THAT(log.text(), Catch::Contains(std::strerror(err)));
  CHECK_FALSE((*read_lease(fs, dir.path()))->holds_flock);

  // Live: renewed 2.9 s ago.
  REQUIRE(a->renew(kT0 + 10s).ok());
  auto live = DirectoryLease::acquire(fs, dir.path(), owner("job-b", 22), kT0 + 12900ms, options);
  REQUIRE_FALSE(live.ok());
  CHECK(live.error().code() == ErrorCode::kFenced);
  CHECK_THAT(live.error().message(), Catch::Contains("job 'job-a'"));
  CHECK_THAT(live.error().message(), Catch::Contains("last renewed 2.90s ago"));
  CHECK_THAT(live.error().message(), Catch::Contains("after 3.00s without renewal"));

  // Stale: 3 s without renewal.
  auto b = DirectoryLease::acquire(fs, dir.path(), owner("job-b", 22), kT0 + 13s, options);
  REQUIRE(b.ok());
  REQUIRE(b->took_over_from().has_value());
  CHECK(b->took_over_from()->owner.job_id == "job-a");
  CHECK(b->took_over_from()->owner.pid == 11);

  // The old holder wakes up: its next renewal says it lost the directory, and to whom.
  auto lost = a->renew(kT0 + 14s);
  REQUIRE_FALSE(lost.ok());
  CHECK(lost.error().code() == ErrorCode::kFenced);
  CHECK_THAT(lost.error().message(), Catch::Contains("lost"));
  CHECK_THAT(lost.error().message(), Catch::Contains("job 'job-b'"));
  // Releasing the lost lease must not remove the new holder's record.
  REQUIRE(a->release().ok());
  CHECK((*read_lease(fs, dir.path()))->owner.job_id == "job-b");
  CHECK(b->renew(kT0 + 15s).ok());
}

TEST_CASE("A live flock keeps a holder whose renewals stopped, unless multi-node", "[lease]") {
  TempDir dir;
  auto a = DirectoryLease::acquire(posix(), dir.path(), owner("job-a", 11), kT0);
  REQUIRE(a.ok());
  const WallTime late = kT0 + 10min;  // never renewed since

  auto refused = DirectoryLease::acquire(posix(), dir.path(), owner("job-b", 22), late);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message(), Catch::Contains("never taken over"));

  // A multi-node coordinator: staleness alone decides (a dead host's lock may linger).
  const LeaseOptions coordinator{3s, false};
  auto fresh =
      DirectoryLease::acquire(posix(), dir.path(), owner("job-b", 22), kT0 + 1s, coordinator);
  CHECK_FALSE(fresh.ok());
  auto b = DirectoryLease::acquire(posix(), dir.path(), owner("job-b", 22), late, coordinator);
  REQUIRE(b.ok());
  CHECK_FALSE(b->holds_flock());
  CHECK_THAT(b->timestamp_only_reason(), Catch::Contains("renewals stopped"));
  CHECK(a->renew(late).error().code() == ErrorCode::kFenced);

  // Once the old holder is gone, the next renewal picks the flock up.
  { DirectoryLease dead = std::move(a).value(); }
  REQUIRE(b->renew(late + 1s).ok());
  CHECK(b->holds_flock());
  CHECK((*read_lease(posix(), dir.path()))->holds_flock);
}

TEST_CASE("A flock proves only local holders gone", "[lease]") {
  TempDir dir;
  std::filesystem::create_directories(dir / ".shardguard");
  auto write_record = [&](const std::string& host, bool holds_flock, WallTime renewed) {
    spit(dir / ".shardguard/lease",
         "{\"format\":\"shardguard-lease\",\"version\":1,\"job_id\":\"job-x\",\"host\":\"" + host +
             "\",\"pid\":77,\"epoch\":2,\"acquired_unix_ms\":" + std::to_string(to_unix_ms(kT0)) +
             ",\"renewed_unix_ms\":" + std::to_string(to_unix_ms(renewed)) +
             ",\"token\":\"t\",\"holds_flock\":" + (holds_flock ? "true" : "false") + "}\n");
  };
  const std::string here = this_process_owner("", 0).host;

  SECTION("a dead holder on this host (its flock is gone) is replaced at once") {
    write_record(here, true, kT0);
    auto b = DirectoryLease::acquire(posix(), dir.path(), owner("job-b"), kT0 + 100ms);
    REQUIRE(b.ok());
    CHECK(b->took_over_from()->owner.pid == 77);
  }
  SECTION("a fresh holder on another host may hold a lock we cannot see") {
    write_record("other-host", true, kT0);
    auto b = DirectoryLease::acquire(posix(), dir.path(), owner("job-b"), kT0 + 100ms);
    REQUIRE_FALSE(b.ok());
    CHECK_THAT(b.error().message(), Catch::Contains("host other-host"));
    CHECK(DirectoryLease::acquire(posix(), dir.path(), owner("job-b"), kT0 + 3s).ok());
  }
  SECTION("a fresh holder without a flock is judged by its timestamp alone") {
    write_record(here, false, kT0);
    CHECK_FALSE(DirectoryLease::acquire(posix(), dir.path(), owner("job-b"), kT0 + 1s).ok());
    CHECK(DirectoryLease::acquire(posix(), dir.path(), owner("job-b"), kT0 + 3s).ok());
  }
  SECTION("an unreadable record with a free lock is replaced") {
    spit(dir / ".shardguard/lease", "{not json");
    CHECK(DirectoryLease::acquire(posix(), dir.path(), owner("job-b"), kT0).ok());
  }
  SECTION("an unreadable record with a held lock is refused, saying so") {
    auto lock = posix().try_lock_file(dir / ".shardguard/lease.lock");
    REQUIRE(lock->status == LockStatus::kAcquired);
    spit(dir / ".shardguard/lease", "{not json");
    auto b = DirectoryLease::acquire(posix(), dir.path(), owner("job-b"), kT0);
    REQUIRE_FALSE(b.ok());
    CHECK(b.error().code() == ErrorCode::kFenced);
    CHECK_THAT(b.error().message(), Catch::Contains("unreadable"));
  }
  SECTION("read_lease is strict") {
    write_record(here, true, kT0);
    std::string text = slurp(dir / ".shardguard/lease");
    text.insert(1, "\"extra\":0,");
    spit(dir / ".shardguard/lease", text);
    auto r = read_lease(posix(), dir.path());
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == ErrorCode::kCorrupt);
    CHECK_THAT(r.error().message(), Catch::Contains(dir / ".shardguard/lease"));
  }
}

TEST_CASE("Lease errors name the file", "[lease]") {
  TempDir dir;
  FaultInjectingFilesystem fs(posix());
  fs.fail_nth_operation(3, ENOSPC, true);  // create_dirs, lock ok; the record write fails
  auto r = DirectoryLease::acquire(fs, dir.path(), owner("job-a"), kT0);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == ErrorCode::kNoSpace);
  CHECK_THAT(r.error().message(), Catch::Contains(".shardguard/lease"));
  CHECK(DirectoryLease::acquire(posix(), dir.path(), LeaseOwner{}, kT0).error().code() ==
        ErrorCode::kInvalid);
}

// Not run by default: what a renewal costs (read the record back, write it atomically).
TEST_CASE("Lease renewal cost", "[.bench]") {
  TempDir dir;
  auto lease = DirectoryLease::acquire(posix(), dir.path(), owner("job-a"), kT0);
  REQUIRE(lease.ok());
  constexpr int kRounds = 200;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kRounds; ++i) REQUIRE(lease->renew(kT0 + std::chrono::seconds(i)).ok());
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("lease renew: %.3f ms each (%d rounds)\n", ms / kRounds, kRounds);
}

}  // namespace
}  // namespace shardguard::checkpoint
