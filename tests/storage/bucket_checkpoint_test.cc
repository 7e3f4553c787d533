// The checkpoint code on a bucket (s3://BUCKET/PREFIX on a real Ceph RGW): the shard writer's
// multipart uploads under each attempt's own keys, the commit as one conditional PUT (a second
// writer of the step loses, never overwrites), the catalog (complete iff the manifest parses
// and every listed object has its size; full verification finds a flipped byte), resharded
// reads by ranged GETs, quarantine marks, retention, the lease by conditional writes, and the
// job identity and history records.
#include <catch2/catch.hpp>
#include <random>
#include <thread>

#include "checkpoint/catalog.h"
#include "checkpoint/commit.h"
#include "checkpoint/dir_history.h"
#include "checkpoint/dir_identity.h"
#include "checkpoint/lease.h"
#include "checkpoint/paths.h"
#include "checkpoint/quarantine.h"
#include "checkpoint/reader.h"
#include "checkpoint/retention.h"
#include "checkpoint/writer.h"
#include "tests/storage/s3_rig.h"

namespace shardguard::checkpoint {
namespace {

using testing::S3Rig;

constexpr uint64_t kRows = 1500, kCols = 2100;  // 12.6 MB of F32: three 5 MiB parts a rank

// The job's weights: a deterministic [kRows, kCols] F32 tensor for `step`.
std::vector<float> weights(uint64_t step) {
  std::mt19937 rng(static_cast<uint32_t>(step));
  std::vector<float> w(kRows * kCols);
  for (auto& x : w) x = static_cast<float>(rng() % 100000) / 7.0f;
  return w;
}

std::span<const std::byte> rows_of(const std::vector<float>& w, uint64_t r0, uint64_t r1) {
  return std::as_bytes(std::span(w).subspan(r0 * kCols, (r1 - r0) * kCols));
}

// Every rank of `world` writes its rows of step `step` for `attempt`; rank 0 commits unless
// `commit` is false (a run killed before its commit).
Result<Manifest> save(storage::Store& store, uint64_t step, uint64_t attempt, uint32_t world,
                      const std::string& job = "bucket-job", bool numbered = true,
                      bool commit = true) {
  const auto w = weights(step);
  std::vector<std::thread> ranks;
  std::vector<Status> results(world);
  for (uint32_t r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      WriterOptions o;
      o.job_id = job;
      o.step = step;
      o.attempt = attempt;
      o.attempts_numbered = numbered;
      o.rank = r;
      o.world_size = world;
      o.block_size = 5ull << 20;
      o.io_threads = 3;
      ShardWriter writer(store, o);
      const uint64_t r0 = kRows * r / world, r1 = kRows * (r + 1) / world;
      auto st = writer.add_chunk("w", DType::kF32, {kRows, kCols}, Box{{r0, 0}, {r1 - r0, kCols}},
                                 rows_of(w, r0, r1));
      if (st.ok()) {
        writer.set_rank_state({"rng" + std::to_string(r), "{\"batch\":7}", "null"});
        if (r == 0) writer.set_global_state({step, "null", "null"});
        auto sidecar = writer.finish();
        if (!sidecar.ok()) st = std::move(sidecar).error();
      }
      results[r] = std::move(st);
    });
  for (auto& t : ranks) t.join();
  for (auto& r : results) SG_RETURN_IF_ERROR(r);
  if (!commit) return Error(ErrorCode::kCancelled, "not committed");
  CommitOptions c;
  c.job_id = job;
  c.step = step;
  c.attempt = attempt;
  c.world_size = world;
  c.timeout = std::chrono::seconds(30);
  return commit_checkpoint(store, RealClock::instance(), c);
}

std::vector<uint64_t> steps(const std::vector<CatalogEntry>& e) {
  std::vector<uint64_t> out;
  for (const auto& x : e) out.push_back(x.step);
  return out;
}

TEST_CASE("a checkpoint is written, committed, listed and read back resharded from a bucket",
          "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  const std::string bucket = rig.new_bucket("ckpt");
  auto store = rig.store(bucket, "runs/a");
  auto m = save(*store, 100, 3, 2);
  REQUIRE(m.ok());
  CHECK(m->files.size() == 2);
  // Data keys carry the attempt; the manifest names them relative to the step.
  CHECK(m->files[0].path == "a000003/shard-00000-of-00002.safetensors");
  CHECK(store->stat("step-000000100/a000003/rank-00001.json")->has_value());
  CHECK(store->stat("step-000000100/manifest.json")->has_value());

  auto list = list_checkpoints(*store, Verify::kChecksum);
  REQUIRE(list.ok());
  REQUIRE(list->size() == 1);
  CHECK((*list)[0].state == CheckpointState::kComplete);
  CHECK((*list)[0].dir == "s3://" + bucket + "/runs/a/step-000000100");

  // Three readers of what two ranks wrote: each box equal to the original rows.
  const auto want = weights(100);
  auto reader = CheckpointReader::open(*store, 100);
  REQUIRE(reader.ok());
  for (uint32_t r = 0; r < 3; ++r) {
    const uint64_t r0 = kRows * r / 3, r1 = kRows * (r + 1) / 3;
    std::vector<float> got((r1 - r0) * kCols);
    REQUIRE(reader->read("w", Box{{r0, 0}, {r1 - r0, kCols}}, std::as_writable_bytes(std::span(got)))
                .ok());
    CHECK(std::equal(got.begin(), got.end(), want.begin() + static_cast<long>(r0 * kCols)));
  }
  // A column box (short runs: the object is fetched whole once) and the rank state.
  std::vector<float> col(kRows * 3);
  REQUIRE(reader->read("w", Box{{0, 7}, {kRows, 3}}, std::as_writable_bytes(std::span(col))).ok());
  CHECK(col[0] == want[7]);
  CHECK(col[3 * 1000 + 2] == want[1000 * kCols + 9]);
  CHECK(reader->rank_state(1).rng == "rng1");
  // Boxes read together (read_many), fetched straight into the boxes: rows that start and
  // end inside checksum blocks, and rows across both shards; by a fresh reader (no block
  // known good yet), then by one that read the middle rows first.
  for (const bool fresh_blocks : {true, false}) {
    const std::vector<std::pair<uint64_t, uint64_t>> spans = {
        {0, 500}, {500, 1000}, {1000, 1500}, {700, 800}, {1499, 1500}};
    auto many = CheckpointReader::open(*store, 100, {.io_threads = 3});
    REQUIRE(many.ok());
    if (!fresh_blocks) {  // some blocks known good first: those are not checked again
      std::vector<float> middle(300 * kCols);
      REQUIRE(many->read("w", Box{{600, 0}, {300, kCols}}, std::as_writable_bytes(std::span(middle)))
                  .ok());
    }
    std::vector<std::vector<float>> got;
    std::vector<CheckpointReader::TensorRead> reads;
    for (auto [r0, r1] : spans) got.emplace_back((r1 - r0) * kCols, -1.0f);
    for (size_t i = 0; i < spans.size(); ++i)
      reads.push_back({"w", Box{{spans[i].first, 0}, {spans[i].second - spans[i].first, kCols}},
                       std::as_writable_bytes(std::span(got[i]))});
    REQUIRE(many->read_many(reads).ok());
    for (size_t i = 0; i < spans.size(); ++i) {
      INFO("rows " << spans[i].first << ".." << spans[i].second);
      CHECK(std::equal(got[i].begin(), got[i].end(),
                       want.begin() + static_cast<long>(spans[i].first * kCols)));
    }
  }

  SECTION("a flipped byte in a shard object is found by full verification and by a read") {
    const std::string key = "step-000000100/a000003/shard-00001-of-00002.safetensors";
    auto bytes = store->read(key, 64ull << 20);
    REQUIRE(bytes.ok());
    (*bytes)[bytes->size() / 2] ^= 0x10;
    REQUIRE(store->put(key, *bytes, {}).ok());  // same size: only a checksum sees it
    auto sized = list_checkpoints(*store, Verify::kSize);
    CHECK((*sized)[0].state == CheckpointState::kComplete);
    auto full = list_checkpoints(*store, Verify::kChecksum);
    REQUIRE(full.ok());
    CHECK((*full)[0].state == CheckpointState::kCorrupt);
    CHECK_THAT((*full)[0].reason, Catch::Contains("shard-00001-of-00002.safetensors: block at"));
    auto fresh = CheckpointReader::open(*store, 100);
    REQUIRE(fresh.ok());
    std::vector<float> all(kRows * kCols);
    auto read = fresh->read("w", Box::whole(std::vector<uint64_t>{kRows, kCols}), std::as_writable_bytes(std::span(all)));
    REQUIRE_FALSE(read.ok());
    CHECK(read.error().code() == ErrorCode::kCorrupt);
    REQUIRE(fresh->checksum_failure().has_value());
    CHECK(fresh->checksum_failure()->file == "a000003/shard-00001-of-00002.safetensors");
  }
  SECTION("a missing shard object makes the step corrupt, naming it") {
    REQUIRE(store->remove("step-000000100/a000003/shard-00000-of-00002.safetensors").ok());
    auto list2 = list_checkpoints(*store, Verify::kSize);
    CHECK((*list2)[0].state == CheckpointState::kCorrupt);
    CHECK_THAT((*list2)[0].reason, Catch::Contains("shard-00000-of-00002.safetensors: missing"));
  }
}

TEST_CASE("a committed step on a bucket is never overwritten", "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  auto store = rig.store(rig.new_bucket("fence"));
  REQUIRE(save(*store, 200, 5, 2).ok());
  const auto before = store->read(manifest_key(200), 1 << 20);
  REQUIRE(before.ok());

  SECTION("a writer of another attempt is fenced before it writes") {
    auto late = save(*store, 200, 6, 2);
    REQUIRE_FALSE(late.ok());
    CHECK(late.error().code() == ErrorCode::kFenced);
    CHECK_THAT(late.error().message(), Catch::Contains("already committed"));
  }
  SECTION("an older attempt's committer, late, is fenced by the newer commit") {
    // As if attempt 6 had committed step 200 while a zombie of attempt 5 still ran.
    REQUIRE(store->remove(manifest_key(200)).ok());
    REQUIRE(save(*store, 200, 6, 2).ok());
    const auto sealed = store->read(manifest_key(200), 1 << 20);
    CommitOptions c;
    c.job_id = "bucket-job";
    c.step = 200;
    c.attempt = 5;
    c.world_size = 2;
    auto r = try_commit_checkpoint(*store, RealClock::instance(), c);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == ErrorCode::kFenced);
    CHECK(*store->read(manifest_key(200), 1 << 20) == *sealed);
  }
  SECTION("the manifest's conditional PUT loses against a concurrent writer") {
    auto put = store->put(manifest_key(200), "{}", storage::PutCondition::if_absent());
    REQUIRE_FALSE(put.ok());
    CHECK(put.error().code() == ErrorCode::kExists);
    CHECK(*store->read(manifest_key(200), 1 << 20) == *before);
  }
}

// Found by the clients' test: a trainer started by hand (attempt 0 on every start) killed
// between its sidecar and the commit could never save that step again.
TEST_CASE("an attempt's sidecar is written once when attempts are numbered; a job started by hand "
          "replaces the one its killed run left", "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  auto store = rig.store(rig.new_bucket("byhand"));
  REQUIRE(save(*store, 300, 0, 2, "bucket-job", /*numbered=*/false, /*commit=*/false).error().code() ==
          ErrorCode::kCancelled);
  REQUIRE(store->stat("step-000000300/a000000/rank-00001.json")->has_value());

  auto twice = save(*store, 300, 0, 2, "bucket-job", /*numbered=*/true);
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.error().code() == ErrorCode::kExists);
  CHECK_THAT(twice.error().message(), Catch::Contains("rank-0000"));

  auto again = save(*store, 300, 0, 2, "bucket-job", /*numbered=*/false);
  REQUIRE(again.ok());
  auto list = list_checkpoints(*store, Verify::kChecksum);
  REQUIRE(list.ok());
  REQUIRE(list->size() == 1);
  CHECK((*list)[0].state == CheckpointState::kComplete);
}

TEST_CASE("quarantine on a bucket is a mark; the step number is free again", "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  auto store = rig.store(rig.new_bucket("quar"));
  REQUIRE(save(*store, 100, 1, 2).ok());
  REQUIRE(save(*store, 200, 1, 2).ok());
  auto q = quarantine_step(*store, 200, "loss spiked", RealClock::instance().wall_now(), "a test");
  REQUIRE(q.ok());
  CHECK(q->key.starts_with("quarantine/step-000000200-"));
  CHECK(q->attempts == std::vector<uint64_t>{1});
  CHECK_FALSE(store->stat(manifest_key(200))->has_value());
  auto list = list_checkpoints(*store, Verify::kSize);
  CHECK(steps(*list) == std::vector<uint64_t>{100});  // gone from the catalog, not "incomplete"
  auto latest = latest_complete(*store, Verify::kSize);
  REQUIRE(latest.ok());
  CHECK(latest->step == 100);
  auto marks = list_quarantined(*store);
  REQUIRE(marks.ok());
  REQUIRE(marks->size() == 1);
  CHECK((*marks)[0].reason == "loss spiked");
  CHECK((*marks)[0].who == "a test");
  CHECK((*marks)[0].bytes > 2 * kRows * kCols);

  SECTION("a rolled-back run saves the step again beside the old files") {
    REQUIRE(save(*store, 200, 2, 2).ok());
    CHECK(store->stat("step-000000200/a000001/shard-00000-of-00002.safetensors")->has_value());
    auto again = list_checkpoints(*store, Verify::kChecksum);
    CHECK(steps(*again) == std::vector<uint64_t>{200, 100});
    CHECK((*again)[0].state == CheckpointState::kComplete);
    auto refused = unquarantine_step(*store, 200);
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.error().message(), Catch::Contains("written again"));
    // Retention of the new step keeps the quarantined attempt's files (evidence)...
    REQUIRE(remove_step(*store, 200).ok());
    CHECK_FALSE(store->stat("step-000000200/a000002/shard-00000-of-00002.safetensors")->has_value());
    CHECK(store->stat("step-000000200/a000001/shard-00000-of-00002.safetensors")->has_value());
    // ... until the quarantine's own gc removes them, and the mark last.
    REQUIRE(remove_quarantined(*store, (*marks)[0]).ok());
    auto left = store->list_all("step-000000200");
    REQUIRE(left.ok());
    CHECK(left->empty());
    CHECK(list_quarantined(*store)->empty());
  }
  SECTION("unquarantine puts the manifest back") {
    auto back = unquarantine_step(*store, 200);
    REQUIRE(back.ok());
    auto list2 = list_checkpoints(*store, Verify::kChecksum);
    CHECK(steps(*list2) == std::vector<uint64_t>{200, 100});
    CHECK((*list2)[0].state == CheckpointState::kComplete);
    CHECK(list_quarantined(*store)->empty());
  }
  SECTION("a mark written without its manifest deleted (a crash) counts as quarantined") {
    auto back = unquarantine_step(*store, 200);
    REQUIRE(back.ok());
    // The crash: the mark is back, the manifest stays.
    QuarantineEntry e = *q;
    REQUIRE(store->put(e.key, "", {}).ok());
    auto again = quarantine_step(*store, 200, "again", RealClock::instance().wall_now(), "a test");
    REQUIRE(again.ok());
    REQUIRE(store->put(manifest_key(200), *again->manifest, {}).ok());  // not deleted: a crash
    REQUIRE(store->remove(e.key).ok());
    auto list3 = list_checkpoints(*store, Verify::kSize);
    CHECK(steps(*list3) == std::vector<uint64_t>{100});
  }
}

TEST_CASE("retention on a bucket removes the manifest first and aborts unfinished uploads",
          "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  const std::string bucket = rig.new_bucket("gc");
  auto store = rig.store(bucket);
  for (uint64_t s : {100, 200, 300}) REQUIRE(save(*store, s, 1, 2).ok());
  // A save of step 400 that died mid-upload: a part written, never completed.
  storage::UploadOptions o;
  o.size = 12ull << 20;
  o.part_bytes = 5ull << 20;
  auto upload = store->begin_upload("step-000000400/a000002/shard-00000-of-00002.safetensors", o);
  REQUIRE(upload.ok());
  std::string part(5ull << 20, 'x');
  REQUIRE((*upload)->write_part(0, std::as_bytes(std::span(part.data(), part.size()))).ok());
  REQUIRE(store->put("step-000000400/a000002/rank-00001.json", "{}", {}).ok());

  auto list = list_checkpoints(*store, Verify::kSize);
  REQUIRE(list.ok());
  CHECK(steps(*list) == std::vector<uint64_t>{400, 300, 200, 100});
  auto plan = plan_retention(*list, {1, 0, {}});
  auto removed = apply_retention(*store, plan);
  REQUIRE(removed.ok());
  CHECK(*removed == 2);  // 100 and 200; 400 is newer than any complete one: maybe in progress
  CHECK(steps(*list_checkpoints(*store, Verify::kSize)) == std::vector<uint64_t>{400, 300});
  CHECK(store->list_all("step-000000100")->empty());
  // The dead upload's step once it is older than a complete one: files and upload go.
  REQUIRE(save(*store, 500, 3, 2).ok());
  REQUIRE(remove_step(*store, 400).ok());
  CHECK(store->list_all("step-000000400")->empty());
  auto uploads = rig.client().list_uploads(bucket, "ckpt/step-000000400/");
  REQUIRE(uploads.ok());
  CHECK(uploads->uploads.empty());
  (*upload)->abort();
}

TEST_CASE("the lease on a bucket: one holder, conditional renewals, a stale one taken over",
          "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  auto store = rig.store(rig.new_bucket("lease"));
  LeaseOptions o;
  o.stale_after = std::chrono::seconds(3);
  const WallTime now = RealClock::instance().wall_now();
  auto first = DirectoryLease::acquire(*store, LeaseOwner{"job-a", "host-a", 11, 1}, now, o);
  REQUIRE(first.ok());
  auto second = DirectoryLease::acquire(*store, LeaseOwner{"job-b", "host-b", 22, 1}, now, o);
  REQUIRE_FALSE(second.ok());
  CHECK(second.error().code() == ErrorCode::kFenced);
  CHECK_THAT(second.error().message(), Catch::Contains("job 'job-a'"));
  CHECK_THAT(second.error().message(), Catch::Contains("host-a"));
  REQUIRE(first->renew(RealClock::instance().wall_now()).ok());
  CHECK(first->renew_interval() >= std::chrono::seconds(1));

  SECTION("a holder that stopped renewing is taken over; its next renewal is refused") {
    std::this_thread::sleep_for(std::chrono::milliseconds(4500));
    auto taker = DirectoryLease::acquire(*store, LeaseOwner{"job-b", "host-b", 22, 2},
                                         RealClock::instance().wall_now(), o);
    REQUIRE(taker.ok());
    REQUIRE(taker->took_over_from().has_value());
    CHECK(taker->took_over_from()->owner.job_id == "job-a");
    auto lost = first->renew(RealClock::instance().wall_now());
    REQUIRE_FALSE(lost.ok());
    CHECK(lost.error().code() == ErrorCode::kFenced);
    CHECK_THAT(lost.error().message(), Catch::Contains("job 'job-b'"));
    REQUIRE(taker->release().ok());
    CHECK_FALSE(read_lease(*store)->has_value());
  }
  SECTION("ten starters at once: exactly one wins") {
    REQUIRE(first->release().ok());
    std::atomic<int> won{0};
    std::vector<std::optional<DirectoryLease>> held(10);
    std::vector<std::thread> starters;
    for (int i = 0; i < 10; ++i)
      starters.emplace_back([&, i] {
        auto l = DirectoryLease::acquire(*store, LeaseOwner{"job-" + std::to_string(i), "h", i, 1},
                                         RealClock::instance().wall_now(), o);
        if (l.ok()) {
          ++won;
          held[static_cast<size_t>(i)].emplace(std::move(*l));
        }
      });
    for (auto& t : starters) t.join();
    CHECK(won == 1);
  }
}

TEST_CASE("a bucket keeps the job's identity and history", "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  auto store = rig.store(rig.new_bucket("ident"));
  const WallTime now = RealClock::instance().wall_now();
  auto id = resolve_job_id(*store, std::nullopt, false, now);
  REQUIRE(id.ok());
  CHECK(id->source == JobIdSource::kGenerated);
  auto again = resolve_job_id(*store, std::nullopt, false, now);
  REQUIRE(again.ok());
  CHECK(again->job_id == id->job_id);
  CHECK(again->source == JobIdSource::kAdopted);
  auto other = resolve_job_id(*store, std::string("someone-else"), false, now);
  REQUIRE_FALSE(other.ok());
  CHECK_THAT(other.error().message(), Catch::Contains("checkpoint location 's3://"));

  DirHistory h;
  h.preempted_without_commit = 2;
  REQUIRE(store_dir_history(*store, h, now).ok());
  auto loaded = load_dir_history(*store);
  REQUIRE(loaded.ok());
  CHECK(loaded->preempted_without_commit == 2);
  REQUIRE(store->put(meta_key(kDirHistoryName), "{not json", {}).ok());
  CHECK_FALSE(load_dir_history(*store).ok());
  auto kept = reset_dir_history(*store, now);
  REQUIRE(kept.ok());
  CHECK(*store->read(meta_key(kDirHistoryCorruptName), 100) == "{not json");
  CHECK(load_dir_history(*store)->preempted_without_commit == 0);
}

}  // namespace
}  // namespace shardguard::checkpoint
