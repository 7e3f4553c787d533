// The unhappy answers of a real server, between the checkpoint code and a real Ceph RGW: a
// fault-injecting proxy of the tests' own (tests/support/fault_proxy.h) answers bursts of 503
// SlowDown, resets connections mid-part and mid-answer, and stalls one rank's upload; and
// radosgw itself is SIGKILLed while a save streams. Whatever happens, no checkpoint is listed
// complete that is not, a retried commit is never mistaken for a lost one, and a stalled rank
// fails its save within seconds instead of holding everyone.
#include <catch2/catch.hpp>
#include <cstring>
#include <thread>

#include "checkpoint/catalog.h"
#include "checkpoint/commit.h"
#include "checkpoint/paths.h"
#include "checkpoint/reader.h"
#include "checkpoint/writer.h"
#include "tests/storage/s3_rig.h"
#include "tests/support/fault_proxy.h"

namespace shardguard::checkpoint {
namespace {

using testing::FaultProxy;
using testing::FaultRule;
using testing::S3Rig;

constexpr uint64_t kRows = 1024, kCols = 4096;  // 16 MiB of F32: 4 parts of 5 MiB per rank at 2

std::vector<float> weights(uint64_t step) {
  std::vector<float> w(kRows * kCols);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 2654435761u + step) % 9973);
  return w;
}

// The S3 stack of the test, but through the proxy.
struct Proxied {
  std::unique_ptr<FaultProxy> proxy;
  std::unique_ptr<storage::s3::S3Client> client;
  std::unique_ptr<storage::S3Store> store;

  Proxied(S3Rig& rig, const std::string& bucket, Duration stall = std::chrono::seconds(10)) {
    proxy = std::move(FaultProxy::start("127.0.0.1", rig.cluster().port()).value());
    auto o = rig.options();
    o.endpoint = proxy->endpoint();
    o.stall_time = stall;
    o.retries = 6;
    client = std::move(storage::s3::S3Client::create(
                           {rig.http(), rig.credentials(), RealClock::instance(), {}, {}}, o)
                           .value());
    store = std::make_unique<storage::S3Store>(*client,
                                               *storage::Location::parse("s3://" + bucket + "/c"));
  }
};

Status write_rank(storage::Store& store, uint64_t step, uint32_t rank, uint32_t world,
                  const std::vector<float>& w, storage::Interrupt interrupt = {}) {
  WriterOptions o;
  o.job_id = "fault-job";
  o.step = step;
  o.attempt = 1;
  o.rank = rank;
  o.world_size = world;
  o.block_size = 5ull << 20;
  o.io_threads = 2;
  o.interrupt = std::move(interrupt);
  ShardWriter writer(store, o);
  const uint64_t r0 = kRows * rank / world, r1 = kRows * (rank + 1) / world;
  SG_RETURN_IF_ERROR(writer.add_chunk(
      "w", DType::kF32, {kRows, kCols}, Box{{r0, 0}, {r1 - r0, kCols}},
      std::as_bytes(std::span(w).subspan(r0 * kCols, (r1 - r0) * kCols))));
  if (rank == 0) writer.set_global_state({step, "null", "null"});
  SG_RETURN_IF_ERROR(writer.finish());
  return {};
}

Result<Manifest> save(storage::Store& store, uint64_t step, uint32_t world = 2) {
  const auto w = weights(step);
  std::vector<Status> results(world);
  std::vector<std::thread> ranks;
  for (uint32_t r = 0; r < world; ++r)
    ranks.emplace_back([&, r] { results[r] = write_rank(store, step, r, world, w); });
  for (auto& t : ranks) t.join();
  for (auto& r : results) SG_RETURN_IF_ERROR(r);
  CommitOptions c;
  c.job_id = "fault-job";
  c.step = step;
  c.attempt = 1;
  c.world_size = world;
  c.timeout = std::chrono::seconds(20);
  return commit_checkpoint(store, RealClock::instance(), c);
}

// Every step the catalog calls complete reads back, every byte checked.
void every_complete_step_reads_back(storage::Store& store) {
  auto list = list_checkpoints(store, Verify::kChecksum);
  REQUIRE(list.ok());
  for (const auto& e : *list) {
    if (e.state != CheckpointState::kComplete) continue;
    auto reader = CheckpointReader::open(store, e.step);
    REQUIRE(reader.ok());
    auto all = reader->read_whole("w");
    REQUIRE(all.ok());
    const auto want = weights(e.step);
    CHECK(std::memcmp(all->data(), want.data(), all->size()) == 0);
  }
}

TEST_CASE("saves commit through bursts of 503 SlowDown and connection resets", "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  const std::string bucket = rig.new_bucket("slow");
  Proxied p(rig, bucket);
  FaultRule slow;
  slow.method = "PUT";
  slow.query_contains = "partNumber";
  slow.count = 6;  // a burst over several parts
  const int parts_503 = p.proxy->add(slow);
  FaultRule manifest_503;
  manifest_503.method = "PUT";
  manifest_503.path_contains = "manifest.json";
  manifest_503.count = 2;
  const int commit_503 = p.proxy->add(manifest_503);
  FaultRule reset;
  reset.kind = FaultRule::Kind::kResetRequest;
  reset.method = "PUT";
  reset.query_contains = "partNumber=2";
  reset.after_bytes = 1 << 20;
  reset.count = 2;
  const int resets = p.proxy->add(reset);
  auto m = save(*p.store, 100);
  REQUIRE(m.ok());
  CHECK(p.proxy->applied(parts_503) == 6);
  CHECK(p.proxy->applied(commit_503) == 2);
  CHECK(p.proxy->applied(resets) == 2);
  every_complete_step_reads_back(*p.store);
  CHECK(list_checkpoints(*p.store, Verify::kSize)->front().state == CheckpointState::kComplete);
}

TEST_CASE("a commit whose answer was lost is read back, not lost and not repeated",
          "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  const std::string bucket = rig.new_bucket("lost");
  Proxied p(rig, bucket);
  // The server stores the manifest; its answer never reaches the committer; the retry gets
  // 412 (If-None-Match) and must find its own bytes there.
  FaultRule cut;
  cut.kind = FaultRule::Kind::kResetResponse;
  cut.method = "PUT";
  cut.path_contains = "manifest.json";
  cut.after_bytes = 0;
  const int id = p.proxy->add(cut);
  auto m = save(*p.store, 200);
  INFO((m.ok() ? std::string("ok") : m.error().message()));
  REQUIRE(m.ok());
  CHECK(p.proxy->applied(id) == 1);
  CHECK(m->step == 200);
  every_complete_step_reads_back(*p.store);
}

TEST_CASE("a stalled upload on one rank fails that rank's save within seconds",
          "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  const std::string bucket = rig.new_bucket("stall");
  Proxied p(rig, bucket, std::chrono::seconds(2));
  REQUIRE(save(*p.store, 100).ok());  // a previous complete checkpoint
  FaultRule stall;
  stall.kind = FaultRule::Kind::kStallRequest;
  stall.method = "PUT";
  stall.path_contains = "shard-00001-of-00002";
  stall.query_contains = "partNumber=1";
  stall.after_bytes = 256 << 10;
  stall.count = -1;  // every try of that part
  const int id = p.proxy->add(stall);
  const auto w = weights(300);
  const auto t0 = std::chrono::steady_clock::now();
  auto st = write_rank(*p.store, 300, 1, 2, w);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_FALSE(st.ok());
  INFO(st.error().message() << " after " << took << " s");
  CHECK_THAT(st.error().message(), Catch::Contains("stalled"));
  CHECK(took < 20.0);  // two tries of a 2 s stall, each noticed within curl's 5 s window
  CHECK(p.proxy->applied(id) == 2);  // a stall is retried once, not six times
  p.proxy->remove(id);
  // Nothing of the failed save counts; the previous step stays the newest complete one.
  auto latest = latest_complete(*p.store, Verify::kSize);
  REQUIRE(latest.ok());
  CHECK(latest->step == 100);
  auto uploads = rig.client().list_uploads(bucket, "c/step-000000300/");
  REQUIRE(uploads.ok());
  CHECK(uploads->uploads.empty());  // the writer aborted its multipart upload
}

TEST_CASE("an interrupt stops a save's uploads at once", "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  const std::string bucket = rig.new_bucket("abort");
  Proxied p(rig, bucket);
  FaultRule stall;
  stall.kind = FaultRule::Kind::kStallRequest;
  stall.method = "PUT";
  stall.query_contains = "partNumber";
  stall.after_bytes = 64 << 10;
  stall.count = -1;
  p.proxy->add(stall);
  std::atomic<bool> abandon{false};
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    abandon = true;
  });
  const auto w = weights(400);
  const auto t0 = std::chrono::steady_clock::now();
  auto st = write_rank(*p.store, 400, 0, 2, w, [&]() -> std::optional<std::string> {
    if (abandon) return std::string("another rank's save of this step failed");
    return std::nullopt;
  });
  later.join();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code() == ErrorCode::kCancelled);
  CHECK_THAT(st.error().message(), Catch::Contains("another rank's save of this step failed"));
  CHECK(took < 3.0);
}

TEST_CASE("radosgw killed while a save streams: nothing false is complete", "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  const std::string bucket = rig.new_bucket("kill");
  auto store = rig.store(bucket, "c");
  REQUIRE(save(*store, 100).ok());
  // Slow the parts down so that the kill lands in the middle of the save.
  Proxied p(rig, bucket);
  FaultRule slow;
  slow.kind = FaultRule::Kind::kDelay;
  slow.query_contains = "partNumber";
  slow.duration = std::chrono::milliseconds(300);
  slow.count = -1;
  p.proxy->add(slow);
  Result<Manifest> m = Error(ErrorCode::kInternal, "not run");
  std::thread saver([&] { m = save(*p.store, 200); });
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  REQUIRE(rig.cluster().kill_rgw().ok());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  REQUIRE(rig.cluster().restart_rgw().ok());
  saver.join();
  // The save may have finished after the restart (retries) or failed: either way the catalog
  // says only what is true.
  auto list = list_checkpoints(*store, Verify::kChecksum);
  REQUIRE(list.ok());
  for (const auto& e : *list) {
    INFO("step " << e.step << ": " << checkpoint_state_name(e.state) << " " << e.reason);
    if (e.step == 100) CHECK(e.state == CheckpointState::kComplete);
    if (e.step == 200 && !m.ok()) CHECK(e.state != CheckpointState::kComplete);
  }
  every_complete_step_reads_back(*store);
  auto latest = latest_complete(*store, Verify::kChecksum);
  REQUIRE(latest.ok());
  CHECK(latest->step == (m.ok() ? 200u : 100u));
}

}  // namespace
}  // namespace shardguard::checkpoint
