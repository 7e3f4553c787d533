// The bucket's Store (storage/s3/s3_store.h) against a real Ceph RGW: whole objects, the two
// conditional writes (exactly one winner of a race; a stale ETag loses), multipart uploads
// written out of order and in parallel, ranged reads into caller memory, paged listings,
// deletes of more than 1,000 keys, unfinished uploads aborted, and the errors a user meets
// (a missing bucket, refused keys) named without a secret.
#include <catch2/catch.hpp>
#include <random>
#include <thread>

#include "tests/storage/s3_rig.h"

namespace shardguard::storage {
namespace {

using testing::S3Rig;

std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

std::span<const std::byte> bytes_of(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

TEST_CASE("a bucket store puts, reads, stats, lists and removes whole objects", "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  auto store = rig.store(rig.new_bucket("basic"));
  REQUIRE(store->put("a/one.json", "{\"x\":1}", {}).ok());
  REQUIRE(store->put("a/b/two", "22", {}).ok());
  REQUIRE(store->put("top", "t", {}).ok());
  CHECK(*store->read("a/one.json", 1024) == "{\"x\":1}");
  auto info = store->stat("a/b/two");
  REQUIRE(info.ok());
  REQUIRE(info->has_value());
  CHECK((*info)->size == 2);
  CHECK_FALSE((*info)->etag.empty());
  auto missing = store->stat("nope");
  REQUIRE(missing.ok());
  CHECK_FALSE(missing->has_value());
  auto gone = store->read("nope", 10);
  REQUIRE_FALSE(gone.ok());
  CHECK(gone.error().code() == ErrorCode::kNotFound);
  CHECK(gone.error().message().find("s3://") != std::string::npos);

  auto root = store->list("");
  REQUIRE(root.ok());
  REQUIRE(root->objects.size() == 1);
  CHECK(root->objects[0].key == "top");
  REQUIRE(root->prefixes.size() == 1);
  CHECK(root->prefixes[0] == "a");
  auto a = store->list("a");
  REQUIRE(a.ok());
  REQUIRE(a->objects.size() == 1);
  CHECK(a->objects[0].key == "a/one.json");
  CHECK(a->prefixes == std::vector<std::string>{"a/b"});
  auto all = store->list_all("a");
  REQUIRE(all.ok());
  CHECK(all->size() == 2);

  SECTION("a record larger than allowed is refused, naming it") {
    auto big = store->read("a/one.json", 3);
    REQUIRE_FALSE(big.ok());
    CHECK(big.error().code() == ErrorCode::kCorrupt);
  }
  SECTION("removing is idempotent") {
    REQUIRE(store->remove("top").ok());
    REQUIRE(store->remove("top").ok());
    CHECK_FALSE(store->stat("top")->has_value());
  }
}

TEST_CASE("a bucket store's create-if-absent has exactly one winner", "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  auto store = rig.store(rig.new_bucket("cond"));
  REQUIRE(store->put("m", "first", PutCondition::if_absent()).ok());
  auto second = store->put("m", "second", PutCondition::if_absent());
  REQUIRE_FALSE(second.ok());
  CHECK(second.error().code() == ErrorCode::kExists);
  CHECK(*store->read("m", 100) == "first");

  // 8 writers race for one key, 5 rounds.
  for (int round = 0; round < 5; ++round) {
    const std::string key = "race-" + std::to_string(round);
    std::atomic<int> won{0}, lost{0};
    std::vector<std::thread> writers;
    for (int w = 0; w < 8; ++w)
      writers.emplace_back([&, w] {
        auto r = store->put(key, "writer " + std::to_string(w), PutCondition::if_absent());
        if (r.ok())
          ++won;
        else if (r.error().code() == ErrorCode::kExists)
          ++lost;
      });
    for (auto& t : writers) t.join();
    CHECK(won == 1);
    CHECK(lost == 7);
  }
}

TEST_CASE("a bucket store's If-Match write loses to a newer version", "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  auto store = rig.store(rig.new_bucket("cas"));
  auto v1 = store->put("lease", "holder A", PutCondition::if_absent());
  REQUIRE(v1.ok());
  REQUIRE_FALSE(v1->empty());
  auto v2 = store->put("lease", "holder A renewed", PutCondition::if_match(*v1));
  REQUIRE(v2.ok());
  CHECK(*v2 != *v1);
  auto stale = store->put("lease", "holder B", PutCondition::if_match(*v1));
  REQUIRE_FALSE(stale.ok());
  CHECK(stale.error().code() == ErrorCode::kFenced);
  auto read = store->read_versioned("lease", 100);
  REQUIRE(read.ok());
  CHECK(read->data == "holder A renewed");
  CHECK(read->etag == *v2);
  REQUIRE(read->age.has_value());
  CHECK(*read->age < std::chrono::seconds(30));
}

TEST_CASE("a bucket store uploads in parts, out of order and in parallel", "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  const std::string bucket = rig.new_bucket("mpu");
  auto store = rig.store(bucket);
  const uint64_t part = 5ull << 20;
  const std::string data = random_bytes(3 * part + 12345, 7);
  UploadOptions o;
  o.size = data.size();
  o.part_bytes = part;
  auto upload = store->begin_upload("step-1/a000000/shard", o);
  REQUIRE(upload.ok());
  std::vector<std::thread> threads;
  std::vector<Status> results(4);
  for (int i = 3; i >= 0; --i)
    threads.emplace_back([&, i] {
      const uint64_t at = static_cast<uint64_t>(i) * part;
      const auto piece = bytes_of(data).subspan(at, std::min<uint64_t>(part, data.size() - at));
      results[static_cast<size_t>(i)] = (*upload)->write_part(at, piece);
    });
  for (auto& t : threads) t.join();
  for (auto& r : results) REQUIRE(r.ok());
  REQUIRE((*upload)->finish().ok());
  // Not visible before publish.
  CHECK_FALSE(store->stat("step-1/a000000/shard")->has_value());
  REQUIRE((*upload)->publish().ok());
  auto info = store->stat("step-1/a000000/shard");
  REQUIRE(info->has_value());
  CHECK((*info)->size == data.size());

  // Ranged reads straight into a buffer.
  auto file = store->open_read("step-1/a000000/shard", {}, data.size());
  REQUIRE(file.ok());
  std::string got(1'000'000, '\0');
  auto n = (*file)->read_at(part - 500, std::as_writable_bytes(std::span(got)));
  REQUIRE(n.ok());
  CHECK(*n == got.size());
  CHECK(got == data.substr(part - 500, got.size()));
  std::string tail(100, '\0');
  auto m = (*file)->read_at(data.size() - 10, std::as_writable_bytes(std::span(tail)));
  REQUIRE(m.ok());
  CHECK(*m == 10);
  auto mapped = store->map("step-1/a000000/shard");
  REQUIRE(mapped.ok());
  CHECK((*mapped)->bytes().size() == data.size());

  SECTION("an aborted upload leaves no object and no upload") {
    auto u = store->begin_upload("step-2/a000000/shard", o);
    REQUIRE(u.ok());
    REQUIRE((*u)->write_part(0, bytes_of(data).first(part)).ok());
    (*u)->abort();
    CHECK_FALSE(store->stat("step-2/a000000/shard")->has_value());
    auto left = rig.client().list_uploads(bucket, "ckpt/step-2/");
    REQUIRE(left.ok());
    CHECK(left->uploads.empty());
  }
  SECTION("uploads a killed writer left are found and aborted") {
    auto u = store->begin_upload("step-3/a000001/shard", o);
    REQUIRE(u.ok());
    REQUIRE((*u)->write_part(0, bytes_of(data).first(part)).ok());
    // As if the process died: no abort() (the destructor would abort).
    auto id = rig.client().create_multipart(bucket, "ckpt/step-3/a000002/shard");
    REQUIRE(id.ok());
    auto aborted = store->abort_uploads("step-3/");
    REQUIRE(aborted.ok());
    CHECK(*aborted == 2);
    auto left = rig.client().list_uploads(bucket, "ckpt/step-3/");
    REQUIRE(left.ok());
    CHECK(left->uploads.empty());
    (*u)->abort();  // already gone: harmless
  }
  SECTION("a small object is one PutObject") {
    UploadOptions small;
    small.size = 1000;
    small.part_bytes = part;
    auto u = store->begin_upload("small", small);
    REQUIRE(u.ok());
    REQUIRE((*u)->write_part(0, bytes_of(data).first(1000)).ok());
    REQUIRE((*u)->finish().ok());
    REQUIRE((*u)->publish().ok());
    CHECK(*store->read("small", 2000) == data.substr(0, 1000));
  }
}

TEST_CASE("a bucket store lists past a page and deletes more than 1,000 keys", "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  auto store = rig.store(rig.new_bucket("many"));
  std::vector<std::string> keys;
  for (int i = 0; i < 1100; ++i) keys.push_back("k/" + std::to_string(i));
  std::vector<std::thread> writers;
  std::atomic<int> failed{0};
  for (int t = 0; t < 8; ++t)
    writers.emplace_back([&, t] {
      for (size_t i = static_cast<size_t>(t); i < keys.size(); i += 8)
        if (!store->put(keys[i], "v", {}).ok()) ++failed;
    });
  for (auto& w : writers) w.join();
  REQUIRE(failed == 0);
  auto all = store->list_all("k");
  REQUIRE(all.ok());
  CHECK(all->size() == 1100);
  REQUIRE(store->remove_many(keys).ok());
  auto none = store->list_all("k");
  REQUIRE(none.ok());
  CHECK(none->empty());
}

TEST_CASE("a missing bucket and refused keys are errors that name them, never the secret",
          "[integration]") {
  SG_REQUIRE_RGW();
  S3Rig& rig = *S3Rig::shared();
  auto store = rig.store("sg-no-such-bucket");
  auto r = store->read("x", 10);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == ErrorCode::kNotFound);
  CHECK(r.error().message().find("sg-no-such-bucket") != std::string::npos);
  CHECK(r.error().message().find("does not exist") != std::string::npos);
  CHECK(rig.client().head_bucket("sg-no-such-bucket").error().code() == ErrorCode::kNotFound);

  auto wrong = s3::make_static_provider({rig.cluster().access_key(), "wrong-secret-value", "", {}},
                                        "a test's wrong keys");
  auto client = s3::S3Client::create({rig.http(), *wrong, RealClock::instance(), {}, {}},
                                     rig.options());
  REQUIRE(client.ok());
  auto bad = (*client)->put_object(rig.new_bucket("deny"), "x", {}, false);
  REQUIRE_FALSE(bad.ok());
  const std::string m = bad.error().message();
  INFO(m);
  CHECK(m.find("403") != std::string::npos);
  CHECK(m.find("refused") != std::string::npos);
  CHECK(m.find("a test's wrong keys") != std::string::npos);
  CHECK(m.find("wrong-secret-value") == std::string::npos);
  CHECK(m.find(rig.cluster().secret_key()) == std::string::npos);
}

}  // namespace
}  // namespace shardguard::storage
