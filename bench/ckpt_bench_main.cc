// sg_bench_ckpt: the per-process worker of bench/ckpt_bench.py. Each rank is its own
// process, as in training. Prints one JSON line per command for the driver.
//
//   save   DIR STEP RANK WORLD TOTAL_BYTES   durable save of this rank's share; rank 0 then
//                                            commits the manifest, as in a job (waiting for
//                                            every sidecar)
//   commit DIR STEP WORLD                    write the manifest
//   drop   DIR STEP                          evict the step's files from the page cache
//   load   DIR STEP RANK WORLD               read this rank's share (any WORLD)
//   warm   DIR STEP [REPEAT]                 warm whole loads by fresh readers (every block
//                                            checked) vs one thread's memcpy, XXH3-64 and
//                                            memcpy+XXH3 of the same bytes
//   stall  TOTAL_BYTES GAP_MS MODE DIR       first and steady async-save stalls of a
//                                            hooks::Client whose staging is sized by MODE:
//                                            none | hint (reserve() at start) | manifest (a
//                                            resume manifest); GAP_MS of "training" between
//                                            client start and the first save
//                                            (bench/ckpt_bench_stall.cc)
//   save, load, clear on s3://BUCKET/PREFIX (bench/ckpt_bench_bucket.cc)
//   resume [STEP_BYTES]                      a rank under `shardguard run`: resume this rank's
//                                            share of the checkpoint given
//                                            (SHARDGUARD_RESUME_MANIFEST), take one step (update
//                                            STEP_BYTES of state, 64 MiB by default), print
//                                            timestamps
//
// The state is 16 F32 tensors of [rows, 4096] (think weights and two Adam moments of a few
// layers), each split by rows across ranks, filled with random bits.
//
// `load`, `warm` and `resume` take ReaderOptions from the environment: SG_BENCH_READ_THREADS
// (io_threads), SG_BENCH_READ_DIRECT (0/1), SG_BENCH_READ_REQUEST_KIB, SG_BENCH_MIN_PREAD_KIB;
// `load` also, for experiments, SG_BENCH_ALIGNED=1 (read into 4 KiB-aligned buffers instead
// of std::vector) and SG_BENCH_LOAD_COLS=N (read column slice rank % N of N, all rows: a box
// that is not contiguous in the file). `save` takes SG_BENCH_IO_THREADS and SG_BENCH_DIRECT.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/ckpt_bench.h"
#include "checkpoint/commit.h"
#include "checkpoint/paths.h"

namespace shardguard::bench {

using namespace shardguard::checkpoint;

int64_t mono_ns(BenchClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

int64_t mono_now_ns() { return mono_ns(BenchClock::now()); }

double since(BenchClock::time_point t0) {
  return std::chrono::duration<double>(BenchClock::now() - t0).count();
}

double gbs(uint64_t bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }

double cpu_seconds() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

void wait_for_go() {
  std::printf("ready\n");
  std::fflush(stdout);
  char line[16];
  if (std::fgets(line, sizeof line, stdin) == nullptr) std::exit(3);
}

int die(const Error& e) {
  std::fprintf(stderr, "sg_bench_ckpt: %s\n", e.message().c_str());
  return 1;
}

uint64_t rows_for(uint64_t total_bytes) {
  return std::max<uint64_t>(1, total_bytes / kTensors / kCols / 4);
}

Box rank_box(uint64_t rows, uint32_t rank, uint32_t world) {
  uint64_t r0 = rank * rows / world, r1 = (rank + 1) * rows / world;
  return Box{{r0, 0}, {r1 - r0, kCols}};
}

namespace {
// SplitMix64's finaliser: a counter-based generator, so a rank's share does not depend on how
// the rows were split.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

std::vector<std::vector<float>> make_state(uint64_t rows, uint32_t rank, uint32_t world) {
  // Random bits, as fio writes: this VM's disk writes compressible data faster (fio with
  // --zero_buffers: 1.3x), so a repetitive state would flatter every ratio to fio.
  Box box = rank_box(rows, rank, world);
  std::vector<std::vector<float>> state(kTensors);
  for (uint64_t t = 0; t < kTensors; ++t) {
    state[t].resize(box.volume());  // kCols is even: whole 64-bit words per row
    const uint64_t first = box.offsets[0] * kCols / 2;
    auto* words = reinterpret_cast<std::byte*>(state[t].data());
    for (size_t i = 0; i < state[t].size() / 2; ++i) {
      const uint64_t w = mix64((t << 56) + first + i);
      std::memcpy(words + i * 8, &w, 8);
    }
  }
  return state;
}

Status add_state(ShardWriter& w, uint64_t step, uint64_t rows, uint32_t rank, uint32_t world,
                 const std::vector<std::vector<float>>& state) {
  for (uint64_t t = 0; t < kTensors; ++t)
    SG_RETURN_IF_ERROR(w.add_chunk("layer" + std::to_string(t), DType::kF32, {rows, kCols},
                                   rank_box(rows, rank, world),
                                   std::as_bytes(std::span(state[t]))));
  if (rank == 0) w.set_global_state({step, "null", "null"});
  return {};
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

namespace {

int save(const std::string& dir, uint64_t step, uint32_t rank, uint32_t world, uint64_t total) {
  const uint64_t rows = rows_for(total);
  auto state = make_state(rows, rank, world);
  WriterOptions o;
  o.checkpoint_dir = dir;
  o.job_id = "bench";
  o.step = step;
  o.rank = rank;
  o.world_size = world;
  if (const char* t = std::getenv("SG_BENCH_IO_THREADS")) o.io_threads = std::atoi(t);
  if (const char* d = std::getenv("SG_BENCH_DIRECT")) o.direct_io = std::atoi(d) != 0;
  ShardWriter writer(PosixFilesystem::instance(), o);
  if (auto st = add_state(writer, step, rows, rank, world, state); !st.ok()) return die(st.error());
  wait_for_go();
  auto t0 = BenchClock::now();
  auto sidecar = writer.finish();
  if (!sidecar.ok()) return die(sidecar.error());
  auto t1 = BenchClock::now();
  double commit_s = 0;
  if (rank == 0) {
    CommitOptions c;
    c.checkpoint_dir = dir;
    c.job_id = "bench";
    c.step = step;
    c.world_size = world;
    auto m = commit_checkpoint(PosixFilesystem::instance(), RealClock::instance(), c);
    if (!m.ok()) return die(m.error());
    commit_s = since(t1);  // mostly waiting for the other ranks' sidecars
    t1 = BenchClock::now();
  }
  std::printf(
      "{\"cmd\":\"save\",\"rank\":%u,\"bytes\":%llu,\"start_ns\":%lld,\"end_ns\":%lld,"
      "\"commit_seconds\":%.6f}\n",
      rank, static_cast<unsigned long long>(sidecar->file.size),
      static_cast<long long>(mono_ns(t0)), static_cast<long long>(mono_ns(t1)), commit_s);
  return 0;
}

int commit(const std::string& dir, uint64_t step, uint32_t world) {
  CommitOptions c;
  c.checkpoint_dir = dir;
  c.job_id = "bench";
  c.step = step;
  c.world_size = world;
  auto t0 = BenchClock::now();
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

int load(const std::string& dir, uint64_t step, uint32_t rank, uint32_t world) {
  // The destination exists and is touched before the clock starts, as a model's tensors
  // are before a resume: a first touch of fresh memory costs a page fault per page (on this
  // kind of VM up to ~3 s per GiB), which is not the reader's cost. The largest box of this
  // rank is allocated once and reused for every tensor.
  const ReaderOptions ro = reader_options_from_env();
  const std::string step_dir = join_path(dir, step_dir_name(step));
  auto probe = CheckpointReader::open(PosixFilesystem::instance(), step_dir, ro);
  if (!probe.ok()) return die(probe.error());
  const bool aligned = std::getenv("SG_BENCH_ALIGNED") != nullptr;
  const char* cols_env = std::getenv("SG_BENCH_LOAD_COLS");
  const uint64_t cols = cols_env ? std::strtoull(cols_env, nullptr, 10) : 0;
  auto box_of = [&](const TensorRecord& t) {
    Box box = rank_box(t.shape[0], rank, world);
    if (cols > 0) {
      const uint64_t c0 = (rank % cols) * t.shape[1] / cols;
      const uint64_t c1 = (rank % cols + 1) * t.shape[1] / cols;
      box = Box{{0, c0}, {t.shape[0], c1 - c0}};
    }
    return box;
  };
  size_t largest = 0;
  for (const auto& name : probe->tensor_names())
    largest = std::max<size_t>(largest, box_of(*probe->tensor(name)).volume() * 4);
  std::vector<std::byte> buf;
  std::unique_ptr<std::byte, decltype(&std::free)> aligned_buf(nullptr, &std::free);
  std::byte* out_base = nullptr;
  if (aligned) {
    void* p = nullptr;
    if (::posix_memalign(&p, 4096, std::max<size_t>(largest, 1)) != 0)
      return die(Error(ErrorCode::kInternal, "out of memory"));
    aligned_buf.reset(static_cast<std::byte*>(p));
    out_base = aligned_buf.get();
  } else {
    buf.resize(largest);
    out_base = buf.data();
  }
  std::memset(out_base, 0, largest);
  wait_for_go();
  auto t0 = BenchClock::now();
  auto reader = CheckpointReader::open(PosixFilesystem::instance(), step_dir, ro);
  if (!reader.ok()) return die(reader.error());
  uint64_t bytes = 0;
  for (const auto& name : reader->tensor_names()) {
    const Box box = box_of(*reader->tensor(name));
    std::span<std::byte> out{out_base, box.volume() * 4};
    auto st = reader->read(name, box, out);
    if (!st.ok()) return die(st.error());
    bytes += out.size();
  }
  auto t1 = BenchClock::now();
  std::printf("{\"cmd\":\"load\",\"rank\":%u,\"bytes\":%llu,\"start_ns\":%lld,\"end_ns\":%lld}\n",
              rank, static_cast<unsigned long long>(bytes), static_cast<long long>(mono_ns(t0)),
              static_cast<long long>(mono_ns(t1)));
  return 0;
}

}  // namespace
}  // namespace shardguard::bench

int main(int argc, char** argv) {
  using namespace shardguard::bench;
  std::vector<std::string> a(argv + 1, argv + argc);
  auto u = [&](size_t i) { return std::strtoull(a.at(i).c_str(), nullptr, 10); };
  try {
    if (a.size() >= 2 && a[1].rfind("s3://", 0) == 0) {
      if (a.size() == 6 && a[0] == "save") return bucket_save(a[1], u(2), u(3), u(4), u(5));
      if (a.size() == 5 && a[0] == "load") return bucket_load(a[1], u(2), u(3), u(4));
      if (a.size() == 2 && a[0] == "clear") return bucket_clear(a[1]);
    }
    if (a.size() == 6 && a[0] == "save") return save(a[1], u(2), u(3), u(4), u(5));
    if (a.size() == 4 && a[0] == "commit") return commit(a[1], u(2), u(3));
    if (a.size() == 3 && a[0] == "drop") return drop(a[1], u(2));
    if (a.size() == 5 && a[0] == "load") return load(a[1], u(2), u(3), u(4));
    if (a.size() == 5 && a[0] == "stall") return stall(u(1), u(2), a[3], a[4]);
    if ((a.size() == 1 || a.size() == 2) && a[0] == "resume")
      return resume_job(a.size() == 2 ? u(1) : 64ull << 20);
    if ((a.size() == 3 || a.size() == 4) && a[0] == "warm")
      return warm(a[1], u(2), a.size() == 4 ? static_cast<int>(u(3)) : 5);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sg_bench_ckpt: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: see the comment at the top of bench/ckpt_bench_main.cc\n");
  return 2;
}
