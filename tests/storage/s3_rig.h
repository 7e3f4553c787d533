// One real Ceph RGW per test binary (tests/support/rgw_cluster.h) and the product's own S3
// stack in front of it (libcurl transport, fixed credentials, S3 client), with a fresh bucket
// per test case. Tests that need it start with SG_REQUIRE_RGW(), which skips (saying why)
// where the fixture cannot run.
// Thread-safety: the rig is built once, on the first test's thread; its client may be used
// from any thread.
#pragma once

#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "storage/curl_transport.h"
#include "storage/s3/s3_client.h"
#include "storage/s3/s3_store.h"
#include "tests/support/rgw_cluster.h"

namespace shardguard::testing {

class S3Rig {
 public:
  // The binary's rig, started on first use; nullptr (and the reason) when it cannot run.
  static S3Rig* shared(std::string* why = nullptr) {
    static std::string reason;
    static std::unique_ptr<S3Rig> rig = [] {
      std::unique_ptr<S3Rig> r;
      if (auto no = RgwCluster::unavailable_reason()) {
        reason = *no;
        return r;
      }
      auto cluster = RgwCluster::start();
      if (!cluster.ok()) {
        reason = cluster.error().message();
        return r;
      }
      r.reset(new S3Rig(std::move(*cluster)));
      return r;
    }();
    if (why != nullptr) *why = reason;
    return rig.get();
  }

  RgwCluster& cluster() { return *cluster_; }
  storage::HttpTransport& http() { return *http_; }
  storage::s3::S3Client& client() { return *client_; }
  storage::s3::CredentialsProvider& credentials() { return *credentials_; }

  // Options for this endpoint; a short stall time so faults show quickly.
  storage::s3::S3Options options() const {
    storage::s3::S3Options o;
    o.endpoint = cluster_->endpoint();
    o.region = "us-east-1";
    o.addressing = storage::s3::Addressing::kPath;
    o.part_size = 5ull << 20;
    o.max_inflight = 40ull << 20;
    o.retries = 3;
    return o;
  }

  // A bucket of its own ("sg-<tag>-<n>"), created now.
  std::string new_bucket(const std::string& tag) {
    static std::atomic<int> n{0};
    const std::string name = "sg-" + tag + "-" + std::to_string(++n);
    auto st = cluster_->create_bucket(name);
    REQUIRE(st.ok());
    return name;
  }

  // A store on s3://bucket/prefix.
  std::unique_ptr<storage::S3Store> store(const std::string& bucket,
                                          const std::string& prefix = "ckpt") {
    auto loc = storage::Location::parse("s3://" + bucket + (prefix.empty() ? "" : "/" + prefix));
    REQUIRE(loc.ok());
    return std::make_unique<storage::S3Store>(*client_, *loc);
  }

 private:
  explicit S3Rig(std::unique_ptr<RgwCluster> cluster) : cluster_(std::move(cluster)) {
    http_ = std::move(storage::CurlTransport::create().value());
    credentials_ = storage::s3::make_static_provider(
        {cluster_->access_key(), cluster_->secret_key(), "", std::nullopt}, "the test's keys");
    client_ = std::move(
        storage::s3::S3Client::create({*http_, *credentials_, RealClock::instance(), {}, {}},
                                      options())
            .value());
  }

  std::unique_ptr<RgwCluster> cluster_;
  std::unique_ptr<storage::CurlTransport> http_;
  std::unique_ptr<storage::s3::CredentialsProvider> credentials_;
  std::unique_ptr<storage::s3::S3Client> client_;
};

#define SG_REQUIRE_RGW()                                   \
  do {                                                     \
    std::string sg_rgw_why_;                               \
    if (::shardguard::testing::S3Rig::shared(&sg_rgw_why_) == nullptr) { \
      WARN("SKIPPED: no RGW: " << sg_rgw_why_);            \
      return;                                              \
    }                                                      \
  } while (0)

}  // namespace shardguard::testing
