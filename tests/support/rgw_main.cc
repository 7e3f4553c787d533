// sg_rgw: a throwaway Ceph RGW (tests/support/rgw_cluster.h) as a program, for the bucket demo
// and the benchmark: starts it, creates the buckets named with --bucket, prints
//   listening http://127.0.0.1:PORT
//   AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... (test-only keys of this cluster)
// and serves until SIGTERM or SIGINT; then stops everything it started.
// Usage: sg_rgw [--bucket NAME]... [--store-bytes BYTES] [--bluestore] [--also-listen ADDR]...
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/support/rgw_cluster.h"

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

int usage() {
  std::fprintf(stderr,
               "usage: sg_rgw [--bucket NAME]... [--store-bytes BYTES] [--bluestore]\n"
               "              [--also-listen ADDR]...\n"
               "  Starts a Ceph RGW on 127.0.0.1 and serves until SIGTERM or SIGINT.\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shardguard::testing;
  RgwOptions options;
  std::vector<std::string> buckets;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      usage();
      return 0;
    }
    if (a == "--bucket" && i + 1 < argc) {
      buckets.emplace_back(argv[++i]);
    } else if (a == "--store-bytes" && i + 1 < argc) {
      options.store_bytes = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--also-listen" && i + 1 < argc) {
      options.also_listen.emplace_back(argv[++i]);
    } else if (a == "--bluestore") {
      options.store = RgwStore::kBluestore;
    } else {
      return usage();
    }
  }
  if (auto why = RgwCluster::unavailable_reason()) {
    std::fprintf(stderr, "sg_rgw: %s\n", why->c_str());
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  auto cluster = RgwCluster::start(options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "sg_rgw: %s\n", cluster.error().message().c_str());
    return 1;
  }
  for (const auto& b : buckets)
    if (auto st = (*cluster)->create_bucket(b); !st.ok()) {
      std::fprintf(stderr, "sg_rgw: bucket %s: %s\n", b.c_str(), st.error().message().c_str());
      return 1;
    }
  std::printf("listening %s\nAWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s\n",
              (*cluster)->endpoint().c_str(), (*cluster)->access_key().c_str(),
              (*cluster)->secret_key().c_str());
  std::fflush(stdout);
  while (!g_stop) ::usleep(100 * 1000);  // a signal ends it within 0.1 s
  (*cluster)->stop();
  return 0;
}
