// sg_bench_ckpt: the per-process worker of bench/ckpt_bench.py. Each rank is its own
// process, as in training. Prints one JSON line per command for the driver.
//
//   sg_bench_ckpt save   DIR STEP RANK WORLD TOTAL_BYTES   durable save of this rank's share
//   sg_bench_ckpt commit DIR STEP WORLD                     write the manifest
//   sg_bench_ckpt drop   DIR STEP                           evict the step's files from the page cache
//   sg_bench_ckpt load   DIR STEP RANK WORLD                read this rank's share (any WORLD)
//   sg_bench_ckpt stall  TOTAL_BYTES                        async snapshot vs memcpy of the same bytes
//   sg_bench_ckpt warm   DIR STEP [REPEAT]                  warm whole loads by fresh readers (every
//                                                           block checked) vs one thread's memcpy,
//                                                           XXH3-64 and memcpy+XXH3 of the same bytes
//
// The state is 16 F32 tensors of [rows, 4096] (think weights and two Adam moments of a few
// layers), each split by rows across ranks.
//
// `load` takes ReaderOptions from the environment: SG_BENCH_READ_THREADS (io_threads),
// SG_BENCH_READ_DIRECT (0/1), SG_BENCH_READ_REQUEST_KIB, SG_BENCH_MIN_PREAD_KIB; and for
// experiments SG_BENCH_ALIGNED=1 (read into 4 KiB-aligned buffers instead of std::vector) and
// SG_BENCH_LOAD_COLS=N (read column slice rank % N of N, all rows: a box that is not
// contiguous in the file).
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/commit.h"
#include "checkpoint/paths.h"
#include "checkpoint/reader.h"
#include "checkpoint/writer.h"

using namespace shardguard;
using namespace shardguard::checkpoint;
using Clock_ = std::chrono::steady_clock;

namespace {

constexpr uint64_t kTensors = 16;
constexpr uint64_t kCols = 4096;

int64_t mono_ns(Clock_::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Start barrier: ranks prepare, say "ready", and start together when the driver says "go".
void wait_for_go() {
  std::printf("ready\n");
  std::fflush(stdout);
  char line[16];
  if (std::fgets(line, sizeof line, stdin) == nullptr) std::exit(3);
}

double since(Clock_::time_point t0) {
  return std::chrono::duration<double>(Clock_::now() - t0).count();
}

uint64_t rows_for(uint64_t total_bytes) { return std::max<uint64_t>(1, total_bytes / kTensors / kCols / 4); }

Box rank_box(uint64_t rows, uint32_t rank, uint32_t world) {
  uint64_t r0 = rank * rows / world, r1 = (rank + 1) * rows / world;
  return Box{{r0, 0}, {r1 - r0, kCols}};
}

int die(const Error& e) {
  std::fprintf(stderr, "sg_bench_ckpt: %s\n", e.message().c_str());
  return 1;
}

// Fills this rank's tensors with non-constant bytes (touching every page first).
std::vector<std::vector<float>> make_state(uint64_t rows, uint32_t rank, uint32_t world) {
  Box box = rank_box(rows, rank, world);
  std::vector<std::vector<float>> state(kTensors);
  for (uint64_t t = 0; t < kTensors; ++t) {
    state[t].resize(box.volume());
    for (size_t i = 0; i < state[t].size(); ++i) state[t][i] = float(t * 7 + i % 1013);
  }
  return state;
}

Result<ShardWriter> prepared_writer(const std::string& dir, uint64_t step, uint32_t rank,
                                    uint32_t world, uint64_t rows,
                                    const std::vector<std::vector<float>>& state) {
  WriterOptions o;
  o.checkpoint_dir = dir;
  o.job_id = "bench";
  o.step = step;
  o.rank = rank;
  o.world_size = world;
  if (const char* t = std::getenv("SG_BENCH_IO_THREADS")) o.io_threads = std::atoi(t);
  if (const char* d = std::getenv("SG_BENCH_DIRECT")) o.direct_io = std::atoi(d) != 0;
  ShardWriter w(PosixFilesystem::instance(), o);
  for (uint64_t t = 0; t < kTensors; ++t)
    SG_RETURN_IF_ERROR(w.add_chunk("layer" + std::to_string(t), DType::kF32, {rows, kCols},
                                   rank_box(rows, rank, world),
                                   std::as_bytes(std::span(state[t]))));
  if (rank == 0) w.set_global_state({step, "null", "null"});
  return w;
}

int save(const std::string& dir, uint64_t step, uint32_t rank, uint32_t world, uint64_t total) {
  const uint64_t rows = rows_for(total);
  auto state = make_state(rows, rank, world);
  auto writer = prepared_writer(dir, step, rank, world, rows, state);
  if (!writer.ok()) return die(writer.error());
  wait_for_go();
  auto t0 = Clock_::now();
  auto sidecar = writer->finish();
  if (!sidecar.ok()) return die(sidecar.error());
  auto t1 = Clock_::now();
  std::printf("{\"cmd\":\"save\",\"rank\":%u,\"bytes\":%llu,\"start_ns\":%lld,\"end_ns\":%lld}\n",
              rank, static_cast<unsigned long long>(sidecar->file.size),
              static_cast<long long>(mono_ns(t0)), static_cast<long long>(mono_ns(t1)));
  return 0;
}

int commit(const std::string& dir, uint64_t step, uint32_t world) {
  CommitOptions c;
  c.checkpoint_dir = dir;
  c.job_id = "bench";
  c.step = step;
  c.world_size = world;
  auto t0 = Clock_::now();
  auto m = commit_checkpoint(PosixFilesystem::instance(), RealClock::instance(), c);
  if (!m.ok()) return die(m.error());
  std::printf("{\"cmd\":\"commit\",\"seconds\":%.6f}\n", since(t0));
  return 0;
}

int drop(const std::string& dir, uint64_t step) {
  const std::string step_dir = join_path(dir, step_dir_name(step));
  auto entries = PosixFilesystem::instance().list(step_dir);
  if (!entries.ok()) return die(entries.error());
  for (const auto& e : *entries) {
    int fd = ::open(join_path(step_dir, e.name).c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  std::printf("{\"cmd\":\"drop\"}\n");
  return 0;
}

ReaderOptions reader_options_from_env() {
  ReaderOptions ro;
  if (const char* t = std::getenv("SG_BENCH_READ_THREADS")) ro.io_threads = std::atoi(t);
  if (const char* d = std::getenv("SG_BENCH_READ_DIRECT")) ro.direct_io = std::atoi(d) != 0;
  if (const char* r = std::getenv("SG_BENCH_READ_REQUEST_KIB"))
    ro.request_bytes = std::strtoull(r, nullptr, 10) << 10;
  if (const char* m = std::getenv("SG_BENCH_MIN_PREAD_KIB"))
    ro.min_pread_bytes = std::strtoull(m, nullptr, 10) << 10;
  return ro;
}

int load(const std::string& dir, uint64_t step, uint32_t rank, uint32_t world) {
  wait_for_go();
  auto t0 = Clock_::now();
  const ReaderOptions ro = reader_options_from_env();
  auto reader = CheckpointReader::open(PosixFilesystem::instance(),
                                       join_path(dir, step_dir_name(step)), ro);
  if (!reader.ok()) return die(reader.error());
  const bool aligned = std::getenv("SG_BENCH_ALIGNED") != nullptr;
  const char* cols_env = std::getenv("SG_BENCH_LOAD_COLS");
  const uint64_t cols = cols_env ? std::strtoull(cols_env, nullptr, 10) : 0;
  uint64_t bytes = 0;
  std::vector<std::byte> buf;
  std::unique_ptr<std::byte, decltype(&std::free)> aligned_buf(nullptr, &std::free);
  size_t aligned_cap = 0;
  for (const auto& name : reader->tensor_names()) {
    const TensorRecord* t = reader->tensor(name);
    Box box = rank_box(t->shape[0], rank, world);
    if (cols > 0) {
      const uint64_t c0 = (rank % cols) * t->shape[1] / cols;
      const uint64_t c1 = (rank % cols + 1) * t->shape[1] / cols;
      box = Box{{0, c0}, {t->shape[0], c1 - c0}};
    }
    const size_t size = box.volume() * 4;
    std::span<std::byte> out;
    if (aligned) {
      if (aligned_cap < size) {
        void* p = nullptr;
        if (::posix_memalign(&p, 4096, size) != 0) return die(Error(ErrorCode::kInternal, "oom"));
        std::memset(p, 0, size);
        aligned_buf.reset(static_cast<std::byte*>(p));
        aligned_cap = size;
      }
      out = {aligned_buf.get(), size};
    } else {
      buf.resize(size);
      out = buf;
    }
    auto st = reader->read(name, box, out);
    if (!st.ok()) return die(st.error());
    bytes += out.size();
  }
  auto t1 = Clock_::now();
  std::printf("{\"cmd\":\"load\",\"rank\":%u,\"bytes\":%llu,\"start_ns\":%lld,\"end_ns\":%lld}\n",
              rank, static_cast<unsigned long long>(bytes), static_cast<long long>(mono_ns(t0)),
              static_cast<long long>(mono_ns(t1)));
  return 0;
}

int stall(uint64_t total) {
  const uint64_t rows = rows_for(total);
  auto state = make_state(rows, 0, 1);
  // Reference: memcpy of the same bytes into memory that was already touched.
  std::vector<std::vector<float>> target(kTensors);
  for (uint64_t t = 0; t < kTensors; ++t) target[t].assign(state[t].size(), 1.0f);
  auto t0 = Clock_::now();
  for (uint64_t t = 0; t < kTensors; ++t)
    std::memcpy(target[t].data(), state[t].data(), state[t].size() * 4);
  const double memcpy_s = since(t0);
  // The async writer's stall: the second save reuses staging memory, as in training.
  std::error_code ec;
  std::string tmpl = (std::filesystem::temp_directory_path(ec) / "sg-bench-stall-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) return die(Error::from_errno("mkdtemp", errno));
  const std::string dir = tmpl;
  AsyncShardWriter async;
  double stall_s = 0, first_s = 0;
  for (uint64_t step = 1; step <= 2; ++step) {
    auto w = prepared_writer(dir, step, 0, 1, rows, state);
    if (!w.ok()) return die(w.error());
    auto s = async.start(std::move(*w));
    if (!s.ok()) return die(s.error());
    (step == 1 ? first_s : stall_s) = *s;
    auto done = async.wait();
    if (!done.ok()) return die(done.error());
  }
  (void)PosixFilesystem::instance().remove_all(dir);
  std::printf("{\"cmd\":\"stall\",\"bytes\":%llu,\"memcpy_seconds\":%.6f,"
              "\"first_stall_seconds\":%.6f,\"stall_seconds\":%.6f}\n",
              static_cast<unsigned long long>(rows * kCols * 4 * kTensors), memcpy_s, first_s,
              stall_s);
  return 0;
}

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

// User and system CPU time of this process (all threads) so far.
double cpu_seconds() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

double gbs(uint64_t bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }

// Best of `repeat`: `fn` returns seconds.
template <typename Fn>
double best_of(int repeat, Fn&& fn) {
  double best = 1e30;
  for (int i = 0; i < repeat; ++i) best = std::min(best, fn());
  return best;
}

int warm(const std::string& dir, uint64_t step, int repeat) {
  const std::string step_dir = join_path(dir, step_dir_name(step));
  if (auto st = cache_step(step_dir); !st.ok()) return die(st.error());
  auto probe = CheckpointReader::open(PosixFilesystem::instance(), step_dir);
  if (!probe.ok()) return die(probe.error());
  // One touched destination per tensor, and one touched source of the largest size for
  // the memory references.
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
  const double memcpy_s = best_of(repeat, [&] {
    auto t0 = Clock_::now();
    for (auto& o : out) std::memcpy(o.data(), src.data(), o.size());
    return since(t0);
  });
  uint64_t sink = 0;
  const double xxh3_s = best_of(repeat, [&] {
    auto t0 = Clock_::now();
    for (auto& o : out) sink ^= XXH3_64bits(src.data(), o.size());
    return since(t0);
  });
  constexpr size_t kPiece = 2 << 20;  // a checksum block, copied then hashed from the cache
  const double copy_hash_s = best_of(repeat, [&] {
    auto t0 = Clock_::now();
    for (auto& o : out)
      for (size_t at = 0; at < o.size(); at += kPiece) {
        const size_t n = std::min(kPiece, o.size() - at);
        std::memcpy(o.data() + at, src.data() + at, n);
        sink ^= XXH3_64bits(o.data() + at, n);
      }
    return since(t0);
  });
  // Each load by a fresh reader: nothing is known good yet, every block is hashed. CPU time
  // (all threads) is reported too: on a machine shared with other work it says more about
  // the cost than the wall time.
  std::vector<double> loads, cpu;
  for (int i = 0; i < repeat; ++i) {
    const double c0 = cpu_seconds();
    auto t0 = Clock_::now();
    auto reader =
        CheckpointReader::open(PosixFilesystem::instance(), step_dir, reader_options_from_env());
    if (!reader.ok()) return die(reader.error());
    size_t k = 0;
    for (const auto& name : reader->tensor_names()) {
      auto st = reader->read(name, Box::whole(reader->tensor(name)->shape), out[k++]);
      if (!st.ok()) return die(st.error());
    }
    loads.push_back(since(t0));
    cpu.push_back(cpu_seconds() - c0);
  }
  std::sort(loads.begin(), loads.end());
  std::sort(cpu.begin(), cpu.end());
  std::printf("{\"cmd\":\"warm\",\"bytes\":%llu,\"memcpy_gbs\":%.3f,\"xxh3_gbs\":%.3f,"
              "\"copy_hash_gbs\":%.3f,\"load_best_gbs\":%.3f,\"load_median_gbs\":%.3f,"
              "\"load_cpu_seconds_best\":%.4f,\"sink\":%llu}\n",
              static_cast<unsigned long long>(bytes), gbs(bytes, memcpy_s), gbs(bytes, xxh3_s),
              gbs(bytes, copy_hash_s), gbs(bytes, loads.front()),
              gbs(bytes, loads[loads.size() / 2]), cpu.front(),
              static_cast<unsigned long long>(sink & 1));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  auto u = [&](size_t i) { return std::strtoull(a.at(i).c_str(), nullptr, 10); };
  try {
    if (a.size() == 6 && a[0] == "save") return save(a[1], u(2), u(3), u(4), u(5));
    if (a.size() == 4 && a[0] == "commit") return commit(a[1], u(2), u(3));
    if (a.size() == 3 && a[0] == "drop") return drop(a[1], u(2));
    if (a.size() == 5 && a[0] == "load") return load(a[1], u(2), u(3), u(4));
    if (a.size() == 2 && a[0] == "stall") return stall(u(1));
    if ((a.size() == 3 || a.size() == 4) && a[0] == "warm")
      return warm(a[1], u(2), a.size() == 4 ? static_cast<int>(u(3)) : 5);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sg_bench_ckpt: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: see the comment at the top of bench/ckpt_bench_main.cc\n");
  return 2;
}
