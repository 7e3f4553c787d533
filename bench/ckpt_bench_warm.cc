// sg_bench_ckpt warm: whole loads of a checkpoint whose files are in the page cache, each by
// a fresh reader (so every block is hashed: verification costs what it costs on a resume),
// against one thread's memcpy of the same bytes between touched buffers, and XXH3-64 and
// memcpy + XXH3-64 alone for scale.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "bench/ckpt_bench.h"
#include "checkpoint/block_sums_xxh3.h"
#include "checkpoint/paths.h"

namespace shardguard::bench {

using namespace shardguard::checkpoint;

namespace {

// Reads every file of the step through the page cache, so that loads are warm.
Status cache_step(const std::string& step_dir) {
  auto& fs = PosixFilesystem::instance();
  SG_ASSIGN_OR_RETURN(auto entries, fs.list(step_dir));
  std::vector<std::byte> buf(8 << 20);
  for (const auto& e : entries) {
    SG_ASSIGN_OR_RETURN(auto f, fs.open_for_read(join_path(step_dir, e.name), {}));
    for (uint64_t at = 0; at < f->size(); at += buf.size()) SG_RETURN_IF_ERROR(f->read_at(at, buf));
  }
  return {};
}

}  // namespace

int warm(const std::string& dir, uint64_t step, int repeat) {
  repeat = std::max(repeat, 1);
  const std::string step_dir = join_path(dir, step_dir_name(step));
  if (auto st = cache_step(step_dir); !st.ok()) return die(st.error());
  auto probe = CheckpointReader::open(PosixFilesystem::instance(), step_dir);
  if (!probe.ok()) return die(probe.error());
  // One touched destination per tensor, and one touched source of the largest size for the
  // memory references.
  std::vector<std::vector<std::byte>> out;
  uint64_t bytes = 0, largest = 0;
  for (const auto& name : probe->tensor_names()) {
    const TensorRecord* t = probe->tensor(name);
    const uint64_t n = Box::whole(t->shape).volume() * bit_size(t->dtype) / 8;
    out.emplace_back(n, std::byte{1});
    bytes += n;
    largest = std::max(largest, n);
  }
  std::vector<std::byte> src(largest, std::byte{7});
  // The references and the loads alternate, so that a burst of other work on this shared
  // machine hits both alike.
  std::vector<double> memcpy_s, xxh3_s, copy_hash_s, load_s, load_cpu;
  uint64_t sink = 0;
  constexpr size_t kPiece = 256 << 10;  // copied, then hashed from the cache
  for (int i = 0; i < repeat; ++i) {
    auto t0 = BenchClock::now();
    for (auto& o : out) std::memcpy(o.data(), src.data(), o.size());
    memcpy_s.push_back(since(t0));
    t0 = BenchClock::now();
    for (auto& o : out) sink ^= XXH3_64bits(src.data(), o.size());
    xxh3_s.push_back(since(t0));
    t0 = BenchClock::now();
    for (auto& o : out)
      for (size_t at = 0; at < o.size(); at += kPiece) {
        const size_t n = std::min(kPiece, o.size() - at);
        std::memcpy(o.data() + at, src.data() + at, n);
        sink ^= XXH3_64bits(o.data() + at, n);
      }
    copy_hash_s.push_back(since(t0));
    // A load by a fresh reader: nothing is known good yet, every block is hashed. CPU time
    // (all threads) too: on a machine shared with other work it says more about the cost
    // than the wall time does.
    const double c0 = cpu_seconds();
    t0 = BenchClock::now();
    auto reader =
        CheckpointReader::open(PosixFilesystem::instance(), step_dir, reader_options_from_env());
    if (!reader.ok()) return die(reader.error());
    size_t k = 0;
    for (const auto& name : reader->tensor_names()) {
      auto st = reader->read(name, Box::whole(reader->tensor(name)->shape), out[k++]);
      if (!st.ok()) return die(st.error());
    }
    load_s.push_back(since(t0));
    load_cpu.push_back(cpu_seconds() - c0);
  }
  auto best = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.front();
  };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf(
      "{\"cmd\":\"warm\",\"bytes\":%llu,\"memcpy_gbs\":%.3f,\"memcpy_median_gbs\":%.3f,"
      "\"xxh3_gbs\":%.3f,\"copy_hash_gbs\":%.3f,\"load_best_gbs\":%.3f,"
      "\"load_median_gbs\":%.3f,\"load_cpu_seconds_best\":%.4f,"
      "\"memcpy_seconds_best\":%.4f,\"sink\":%llu}\n",
      static_cast<unsigned long long>(bytes), gbs(bytes, best(memcpy_s)),
      gbs(bytes, median(memcpy_s)), gbs(bytes, best(xxh3_s)), gbs(bytes, best(copy_hash_s)),
      gbs(bytes, best(load_s)), gbs(bytes, median(load_s)), best(load_cpu), best(memcpy_s),
      static_cast<unsigned long long>(sink & 1));
  return 0;
}

}  // namespace shardguard::bench
