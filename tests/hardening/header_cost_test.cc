// Finding: two legal 100 MB shard headers took 16 s and 1.5 GB for `ckpt inspect --hash`.
// Shard headers near the format's 100 MB limit, legal, in the shapes a hostile or careless
// writer can give them: `ckpt inspect --hash` and `ckpt verify --full` over two such shards
// stay within 4x the headers' size in memory (peak RSS of the real process) and a bounded
// CPU time: under half of the 16 s the finding took (CPU seconds, user + system, printed with
// the wall time; the speed itself is docs/perf.md's, not a timed test's).
#include <sys/resource.h>

#include <catch2/catch.hpp>

#include "tests/hardening/ckpt_fixture.h"
#include "tests/hardening/spawn.h"
#include "tests/support/command.h"

using namespace shardguard;
using namespace shardguard::testing;

namespace {

constexpr uint64_t kHeaderBytes = 100'000'000;
constexpr int kShards = 2;
// What the forked child holds before exec (a copy of this test process) counts in its
// peak RSS too; this leaves room for it.
constexpr long kBaselineKib = 64 << 10;

const char* name_of(Padding p) {
  switch (p) {
    case Padding::kZeroTensors:
      return "1.6 M zero-size tensors";
    case Padding::kWideShapes:
      return "32-dimension tensors";
    case Padding::kMetadataString:
      return "one 100 MB metadata string";
    case Padding::kMetadataEntries:
      return "6 M metadata entries";
  }
  return "?";
}

}  // namespace

TEST_CASE("inspect --hash and verify --full over two 100 MB shard headers", "[integration]") {
  const auto padding = GENERATE(Padding::kZeroTensors, Padding::kWideShapes,
                                Padding::kMetadataString, Padding::kMetadataEntries);
  TempDir dir;
  const std::string step = committed_step(dir / "ckpt", 100);
  grow_headers(step, kHeaderBytes, padding);
  for (const char* command : {"inspect", "verify"}) {
    std::vector<std::string> argv = {shardguard_bin(), "ckpt", command, dir / "ckpt"};
    argv.push_back(std::string(command) == "inspect" ? "--hash" : "--full");
    auto r = spawn(argv);
    WARN(name_of(padding) << ", ckpt " << command << ": exit " << r.exit_code << ", " << r.seconds
                          << " s wall, " << r.cpu_seconds << " s CPU, peak RSS "
                          << r.max_rss_kib / 1024 << " MiB\n"
                          << r.err.substr(0, 300));
    if (padding == Padding::kMetadataEntries) {
      // Metadata is a handful of strings; millions of entries are refused (each would cost
      // ~100 bytes of map node for ~15 bytes of JSON), and quickly.
      CHECK(r.exit_code == 3);
      CHECK_THAT(r.err, Catch::Contains("more than 65536 entries"));
    } else {
      CHECK(r.exit_code == 0);
    }
    CHECK(r.max_rss_kib <= static_cast<long>(4 * kShards * kHeaderBytes / 1024) + kBaselineKib);
    // The finding was 16 s. 2.1 s for the 1.6 M zero-size tensors on an idle VM once the
    // shard's key map held only the keys the manifest names (4.6 s when it held every header
    // entry); the same binary (a8a4d2e) measured 3.6-5.5 s of CPU on the CI VM in Dec 2026
    // with no change of the code, so the bound is half the finding, not a fraction of an
    // idle machine's best.
    CHECK(r.cpu_seconds < 8.0);
  }
}
