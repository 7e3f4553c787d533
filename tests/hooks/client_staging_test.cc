// The client's staging memory for async saves (issue 15, first-save stall): sized at
// creation from this rank's file in the resume manifest, else from the size hint
// (ClientOptions::staging_bytes / SHARDGUARD_STAGING_BYTES), else by the first save; reserve()
// from C++ and the C ABI; and the populated memory is what the first async save snapshots
// into (same address, no new mapping).
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "checkpoint/reader.h"
#include "hooks/client.h"
#include "hooks/include/shardguard.h"
#include "tests/support/temp_dir.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::hooks;
using shardguard::testing::TempDir;

namespace {

constexpr size_t kFloats = 3 << 20;  // 12 MiB of state

std::unique_ptr<Client> make_client(ClientOptions o) {
  o.job_id = "staging-job";
  o.checkpoint_signal = 0;
  auto c = Client::create(o);
  if (!c.ok()) FAIL(c.error().message());
  return std::move(c).value();
}

Status save_step(Client& c, uint64_t step, const std::vector<float>& data) {
  auto w = c.begin_save(step);
  SG_RETURN_IF_ERROR(
      w.add_tensor("w", checkpoint::DType::kF32, {data.size()}, std::as_bytes(std::span(data))));
  w.set_global_state({step, "null", "null"});
  SG_RETURN_IF_ERROR(c.save(std::move(w)));
  return c.wait();
}

bool population_ends(Client& c) {
  for (auto until = std::chrono::steady_clock::now() + 20s;
       std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(5ms))
    if (!c.staging().stats().populating) return true;
  return false;
}

}  // namespace

TEST_CASE("client: async staging is sized and populated from the resume manifest",
          "[integration]") {
  TempDir ckpt;
  std::vector<float> state(kFloats, 1.25f);
  uint64_t file_size = 0;
  {
    ClientOptions o;
    o.checkpoint_dir = ckpt.path();
    auto first = make_client(o);
    auto st = save_step(*first, 5, state);
    REQUIRE(st.ok());
    auto r = first->open_resume();
    REQUIRE(r.ok());
    file_size = r->manifest().files.at(0).size;
  }
  ClientOptions o;
  o.checkpoint_dir = ckpt.path();
  o.async = true;
  o.resume_manifest = ckpt / "step-000000005/manifest.json";
  o.under_shardguard = true;
  auto c = make_client(o);
  // At creation, before any save: this rank's file size, in whole huge pages.
  CHECK(c->staging().capacity() >= file_size);
  CHECK(c->staging().capacity() < file_size + checkpoint::kStagingHugePage);
  REQUIRE(population_ends(*c));
  CHECK(c->staging().stats().populated_bytes == c->staging().capacity());
  std::byte* populated = c->staging().data();
  // The first async save snapshots into that memory; nothing is mapped anew.
  REQUIRE(save_step(*c, 6, state).ok());
  CHECK(c->staging().data() == populated);
  CHECK(c->staging().stats().populated_bytes == c->staging().capacity());
}

TEST_CASE("client: the size hint, then reserve(), size the staging", "[integration]") {
  TempDir ckpt;
  SECTION("ClientOptions::staging_bytes (SHARDGUARD_STAGING_BYTES) on an async client") {
    ClientOptions o;
    o.checkpoint_dir = ckpt.path();
    o.async = true;
    o.staging_bytes = 40 << 20;
    auto c = make_client(o);
    // The hint counts tensor bytes; the header's room makes it one huge page more.
    CHECK(c->staging().capacity() == (42u << 20));
    REQUIRE(population_ends(*c));
  }
  SECTION("the environment variable reaches the options") {
    ::setenv("SHARDGUARD_STAGING_BYTES", "12345678", 1);
    ::setenv("SHARDGUARD_CHECKPOINT_DIR", ckpt.path().c_str(), 1);
    auto c = Client::from_env(ClientOptions{});
    ::unsetenv("SHARDGUARD_STAGING_BYTES");
    ::unsetenv("SHARDGUARD_CHECKPOINT_DIR");
    REQUIRE(c.ok());
    CHECK((*c)->options().staging_bytes == 12345678u);
  }
  SECTION("a bad value is named") {
    ::setenv("SHARDGUARD_STAGING_BYTES", "4GiB", 1);
    ::setenv("SHARDGUARD_CHECKPOINT_DIR", ckpt.path().c_str(), 1);
    auto c = Client::from_env(ClientOptions{});
    ::unsetenv("SHARDGUARD_STAGING_BYTES");
    ::unsetenv("SHARDGUARD_CHECKPOINT_DIR");
    REQUIRE_FALSE(c.ok());
    CHECK_THAT(c.error().message(), Catch::Contains("SHARDGUARD_STAGING_BYTES"));
  }
  SECTION("a sync client maps nothing until reserve()") {
    ClientOptions o;
    o.checkpoint_dir = ckpt.path();
    o.staging_bytes = 40 << 20;  // a hint only matters to async saves
    auto c = make_client(o);
    CHECK(c->staging().capacity() == 0);
    REQUIRE(c->reserve(20 << 20).ok());
    CHECK(c->staging().capacity() == (22u << 20));
    REQUIRE(population_ends(*c));
    CHECK(c->staging().stats().populated_bytes == (22u << 20));
  }
}

TEST_CASE("C ABI: sg_client_reserve", "[integration]") {
  TempDir ckpt;
  sg_client* c = nullptr;
  REQUIRE(sg_client_from_env(ckpt.path().c_str(), 0, 1, &c) == SG_OK);
  CHECK(sg_client_reserve(c, 8u << 20) == SG_OK);
  CHECK(sg_client_reserve(nullptr, 1) == SG_ERR_INVALID);
  CHECK(std::string(sg_last_error()).find("NULL client") != std::string::npos);
  // The reserved memory serves the first async save.
  std::vector<float> w(1 << 20, 2.0f);
  sg_writer* wr = nullptr;
  REQUIRE(sg_client_begin_save(c, 3, &wr) == SG_OK);
  const uint64_t shape[1] = {w.size()};
  REQUIRE(sg_writer_add_tensor(wr, "w", "F32", 1, shape, w.data(), w.size() * 4) == SG_OK);
  REQUIRE(sg_writer_set_global_state(wr, 3, nullptr, nullptr) == SG_OK);
  REQUIRE(sg_client_save(c, wr, nullptr) == SG_OK);
  CHECK(sg_client_wait(c) == SG_OK);
  CHECK(sg_client_last_committed_step(c) == 3);
  sg_client_free(c);
}
